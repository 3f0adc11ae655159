"""`draftwise profile`: where the time of a speculative round goes.

For a pair, a width (or several), a prompt and a token count it runs the real
decoder the server runs (`drafter.batch.BatchDecoder`, a batch of one) three ways:

- plain, as served: the round total, cold (the first request after load) and warm,
  and every round's time, to see whether rounds stay steady;
- instrumented: `RoundTimer` evaluates each stage's outputs as it ends, so draft
  forward, verify forward, choice, host sync, rollback and the rest are timed apart;
- classic decode of the same prompt: the one-row step the round competes with.

`--requests N` adds N requests of different prompt lengths (the prompt repeated and
cut), so rounds that cross K/V lengths and cache allocations are seen. The garbage
collector's full passes during the plain rounds are timed too: on a fast device one
can cost more than a round, and so are the rounds in which a target or drafter KV
buffer grew (`growth_rounds`): none as served, where each request's buffers are sized
at its prefill; `--kv grown` leaves mlx-lm growing them by 256 rows mid-request, the
control arm. Each timed round also records the decoding thread's CPU time and its
involuntary context switches (`round_cpu_ms`, `round_preempted`): a slow round with the
usual CPU time and a switch was the host taking the thread away, not more work.
`--warm-up` runs the server's startup warm-up first, to check steadiness as served.
Output is a table, or with `--json` one JSON object per width.

`--batch N` times batched classic steps instead: N requests decoded together one token
a step, as a loaded server decodes a batch the width control keeps classic, by the
speculative engine (its drafter's context features kept every step) and by a classic
engine loaded beside it (`--draft-model none`), in alternating passes: what a
speculative server pays per classic step at that batch size.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drafter.diagnostics import (
    ACTIVATION_MODES,
    ATTENTION_MODES,
    LINEAR_MODES,
)  # no MLX: the CLI parser stays light

if TYPE_CHECKING:
    from drafter.decoding import GenerationStats
    from drafter.speculative import RoundTimer

DEFAULT_PROMPT = "def quicksort(items):\n    "


@dataclass
class WidthProfile:
    width: int
    backend: str
    attention: str
    linear: str
    activation: str
    heap: str  # frozen (as served: drafter.loading.freeze_heap) or collected
    warm_up_s: float | None  # the server's startup warm-up (--warm-up), or None: not run
    rounds: int
    acceptance_length: float
    round_ms: float  # warm, plain: median wall time of a round (the --prompt repeats)
    round_ms_cold: float  # the first round of the first request after load
    verify_ms: float
    draft_ms: float
    step_ms: float  # classic decode: median one-row step
    stages_ms: dict[str, float]
    rest_share: float  # (round - verify - draft) / round, warm
    max_round_ms: float  # these two and round_times_ms: the repeats plus --requests prompts
    rounds_over_2x_median: int
    round_times_ms: list[float] = field(default_factory=list)
    full_collections_ms: list[float] = field(default_factory=list)  # during the plain rounds
    kv: str = "reserved"  # the KV buffers: sized at prefill (as served), or grown mid-request
    growth_rounds: list[int] = field(default_factory=list)  # round_times_ms indices where a
    # target or drafter KV buffer grew
    warm_up_unmet: int | None = None  # crossing rows the warm-up left unmet (WarmUp)
    round_keys: list[int] = field(default_factory=list)  # per round_times_ms entry: the
    # target's cached rows after it, so a slow round can be placed (a request's start, or
    # a kernel's length threshold: MLX's CUDA vector attention takes two passes past 1,024)
    round_cpu_ms: list[float] = field(default_factory=list)  # per round_times_ms entry: the
    # decoding thread's CPU time in it (wall time well above it: the thread waited)
    round_preempted: list[int] = field(default_factory=list)  # per entry: the decoding
    # thread's involuntary context switches in it (the host took the CPU away)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("profile", help="per-stage times of a speculative round")
    parser.add_argument("--model", default=None, help="target directory; default: the pair")
    parser.add_argument("--draft-model", default=None, help="drafter directory")
    parser.add_argument("--width", default="4", help="a width, or several: 2,4,8 (up to the block)")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="warm requests per measurement")
    parser.add_argument("--requests", type=int, default=0, help="extra prompt lengths")
    parser.add_argument(
        "--attention",
        choices=("auto", *ATTENTION_MODES),
        default="auto",
        help="attention (drafter/attention.py): exact-length keys, polyexp (MLX's "
        "attention with a vectorised exp, drafter/polyexp.py), vector (the CUDA vector "
        "kernel, a verify block in one launch, cuDNN attention off), or auto (the "
        "backend's bundle, drafter/kernels.py)",
    )
    parser.add_argument(
        "--linear",
        choices=("auto", *LINEAR_MODES),
        default="auto",
        help="how products run (drafter/linear.py): rowwise (multi-row ones as batched "
        "one-row products), padded (one-row ones as two-row products), columns (the tied "
        "head by a contiguous copy), matrix (as mlx-lm builds them), or auto (rowwise on "
        "CUDA, padded on an AMD CPU under MKL, columns on other CPUs)",
    )
    parser.add_argument(
        "--activation",
        choices=("auto", *ACTIVATION_MODES),
        default="auto",
        help="the target's feed-forward SwiGLU (drafter/activation.py): mlx (mlx-lm's), "
        "polyexp (with a vectorised exp; pair it with MALLOC_MMAP_THRESHOLD_=33554432 "
        "MALLOC_TRIM_THRESHOLD_=1073741824 for long prompts: drafter/loading.py, "
        "keep_freed_memory), prefill (polyexp for prefill chunks only), or auto (the "
        "backend's bundle, drafter/kernels.py)",
    )
    parser.add_argument(
        "--heap",
        choices=("frozen", "collected"),
        default="frozen",
        help="frozen: after load, what was loaded leaves the garbage collector, as in a "
        "server (drafter.loading.freeze_heap); collected: it stays, so full collections "
        "walk it",
    )
    parser.add_argument(
        "--warm-up",
        action="store_true",
        help="run the server's startup warm-up (drafter/warmup.py) after load; then "
        "'cold' is the first request after it",
    )
    parser.add_argument(
        "--kv",
        choices=("reserved", "grown"),
        default="reserved",
        help="reserved: each request's KV buffers are sized at its prefill, as served "
        "(drafter/attention.py: reserve); grown: mlx-lm grows them by 256 rows mid-request",
    )
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true", help="one JSON object per width")
    parser.add_argument(
        "--batch",
        type=int,
        default=0,
        help="time batched classic steps of N requests instead, the speculative engine's "
        "against a classic engine's (--repeats passes each, --max-tokens steps a pass)",
    )
    parser.set_defaults(func=run_profile)
    return parser


def widths_of(text: str) -> list[int]:
    try:
        widths = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        widths = []
    if not widths or min(widths) < 2:
        raise SystemExit(f"error: invalid --width {text!r}: integers >= 2, comma-separated")
    return widths


def run_profile(args: argparse.Namespace) -> int:
    widths = widths_of(args.width)
    if args.batch < 0 or args.batch == 1:
        raise SystemExit(f"error: invalid --batch {args.batch}: 2 or more requests (0: off)")
    import structlog  # log lines to stderr: stdout carries the results (JSON lines)

    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    from drafter.loading import LoadOptions, load_engine
    from drafter.warmup import warm_up
    from server.settings import ServeSettings

    cache_dir = args.cache_dir or ServeSettings().cache_dir
    options = LoadOptions(
        cache_dir=cache_dir,
        model=args.model,
        draft_model=args.draft_model,
        draft_block_size=str(widths[0]),
        exactness="off",
        dtype=args.dtype,
        warm_up=False,  # cold: the first request after load (or after --warm-up, below)
        freeze_heap=args.heap == "frozen",
    )
    loaded = load_engine(options)
    if loaded.engine.drafter is None:
        print("error: profile needs a drafter (--draft-model none serves classic)", file=sys.stderr)
        return 2
    chosen = {
        kind: value
        for kind, value in (
            ("attention", args.attention),
            ("linear", args.linear),
            ("activation", args.activation),
        )
        if value != "auto"
    }
    loaded.engine.use(**chosen)
    if args.batch:
        classic = load_engine(replace(options, draft_model="none")).engine
        classic.use(**chosen)
        steps = profile_batch(loaded.engine, classic, args, loaded.device.backend)
        print(json.dumps(asdict(steps)) if args.json else batch_row(steps), flush=True)
        return 0
    attention, linear = loaded.engine.attention, loaded.engine.linear
    loaded.engine.reserve_kv = args.kv == "reserved"
    # After the attention and linear choices, as the server warms what it will serve.
    warmed = warm_up(loaded.engine) if args.warm_up else None
    prompt = loaded.engine.tokenizer.encode(args.prompt)
    for width in widths:
        result = profile_width(
            loaded.engine, width, prompt, args.max_tokens, args.repeats, args.requests
        )
        result.backend, result.attention, result.linear = loaded.device.backend, attention, linear
        result.activation = loaded.engine.activation
        result.heap, result.kv = args.heap, args.kv
        if warmed is not None:
            result.warm_up_s, result.warm_up_unmet = warmed.seconds, warmed.unmet
        print(json.dumps(asdict(result)) if args.json else table_row(result), flush=True)
    return 0


def gaps(steps: Any) -> list[float]:
    """Wall seconds between consecutive items of a generator: one per round (or
    per classic step) after the prefill's first token."""
    times, last = [], None
    for _ in steps:
        now = time.perf_counter()
        if last is not None:
            times.append(now - last)
        last = now
    return times


@dataclass
class TimedRounds:
    """One greedy speculative request, round by round."""

    seconds: list[float]  # each round's wall time
    grew: list[bool]  # whether a target or drafter KV buffer that had rows grew in it
    keys: list[int]  # the target's cached rows after it (its verify read up to width more)
    stats: GenerationStats
    cpu: list[float] = field(default_factory=list)  # the thread's CPU seconds in it
    preempted: list[int] = field(default_factory=list)  # its involuntary context switches

    def extend(self, other: TimedRounds) -> None:
        """Append `other`'s rounds (the stats stay this object's)."""
        self.seconds += other.seconds
        self.grew += other.grew
        self.keys += other.keys
        self.cpu += other.cpu
        self.preempted += other.preempted


def thread_counters() -> tuple[float, int]:
    """The calling thread's CPU seconds and involuntary context switches so far (the
    process's switches where the platform has no per-thread usage)."""
    who = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
    return time.thread_time(), resource.getrusage(who).ru_nivcsw


def timed_rounds(
    engine: Any, prompt: list[int], tokens: int, width: int, timer: RoundTimer | None = None
) -> TimedRounds:
    from drafter.batch import BatchDecoder, run_alone
    from drafter.decoding import GenerationStats
    from drafter.sampling import SamplingParams

    stats = GenerationStats()
    decoder = BatchDecoder(engine, width)
    sequence = decoder.start(prompt, tokens, SamplingParams(), stats, True, timer)
    session = sequence.session

    def buffer_rows() -> list[int]:
        """Each KV buffer's length; 0 before its first write (the drafter's buffers are
        first allocated in the first round, as served: that is not a growth)."""
        caches = session.cache + session.draft_cache
        return [0 if getattr(c, "keys", None) is None else c.keys.shape[2] for c in caches]

    result = TimedRounds([], [], [], stats)
    last, rows, counters = None, buffer_rows(), thread_counters()
    for _ in run_alone(decoder, sequence, width):
        now, now_counters = time.perf_counter(), thread_counters()
        after = buffer_rows()
        if last is not None:
            result.grew.append(any(0 < a < b for a, b in zip(rows, after, strict=False)))
            result.seconds.append(now - last)
            result.keys.append(session.cache[0].offset)
            result.cpu.append(now_counters[0] - counters[0])
            result.preempted.append(now_counters[1] - counters[1])
        last, rows, counters = now, after, now_counters
    return result


def classic_step_ms(engine: Any, prompt: list[int], tokens: int) -> float:
    from drafter.sampling import SamplingParams

    steps = engine.generate(prompt, tokens, SamplingParams(), ignore_eos=True, width=None)
    return 1000 * statistics.median(gaps(steps))


def prompt_lengths(prompt: list[int], count: int) -> list[list[int]]:
    """`count` prompts from 16 to ~1,000 tokens: the prompt repeated, then cut."""
    longest = (prompt * (1 + 1024 // max(1, len(prompt))))[:1024]
    return [longest[: 16 + (1000 * i) // max(1, count)] for i in range(count)]


class FullCollections:
    """While entered, the wall time (ms) of each full (generation-2) collector pass."""

    def __init__(self) -> None:
        self.ms: list[float] = []
        self._began = 0.0

    def __enter__(self) -> FullCollections:
        gc.callbacks.append(self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._note)

    def _note(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.ms.append(round(1000 * (time.perf_counter() - self._began), 3))


def profile_width(
    engine: Any, width: int, prompt: list[int], tokens: int, repeats: int, requests: int
) -> WidthProfile:
    from drafter.decoding import GenerationStats
    from drafter.speculative import STAGES, RoundTimer

    with FullCollections() as full:
        cold = timed_rounds(engine, prompt, tokens, width).seconds
        pooled = TimedRounds([], [], [], GenerationStats())  # every plain round below
        rounds, accepted_length = 0, 0.0
        for _ in range(repeats):
            timed = timed_rounds(engine, prompt, tokens, width)
            pooled.extend(timed)
            rounds, accepted_length = timed.stats.rounds, timed.stats.acceptance_length
        warm = list(pooled.seconds)  # the --prompt repeats only: the round time
        for extra in prompt_lengths(prompt, requests):  # steadiness pools these too
            pooled.extend(timed_rounds(engine, extra, tokens, width))
        steady = pooled.seconds
    timer = RoundTimer()
    for _ in range(repeats):
        timed_rounds(engine, prompt, tokens, width, timer)
    stages = {s: 1000 * statistics.median(timer.stages[s]) for s in STAGES if timer.stages[s]}
    round_ms = 1000 * statistics.median(warm)
    verify, draft = stages.get("verify", 0.0), stages.get("draft", 0.0)
    return WidthProfile(
        width=width,
        backend="",
        attention="",
        linear="",
        activation="",
        heap="",
        warm_up_s=None,
        rounds=rounds,
        acceptance_length=round(accepted_length, 3),
        round_ms=round(round_ms, 3),
        round_ms_cold=round(1000 * cold[0], 3) if cold else 0.0,
        verify_ms=round(verify, 3),
        draft_ms=round(draft, 3),
        step_ms=round(classic_step_ms(engine, prompt, tokens), 3),
        stages_ms={k: round(v, 3) for k, v in stages.items()},
        rest_share=round(max(0.0, round_ms - verify - draft) / round_ms, 3) if round_ms else 0.0,
        max_round_ms=round(1000 * max(steady), 3),
        rounds_over_2x_median=sum(t > 2 * statistics.median(steady) for t in steady),
        round_times_ms=[round(1000 * t, 3) for t in steady],
        full_collections_ms=full.ms,
        growth_rounds=[i for i, g in enumerate(pooled.grew) if g],
        round_keys=pooled.keys,
        round_cpu_ms=[round(1000 * t, 3) for t in pooled.cpu],
        round_preempted=pooled.preempted,
    )


@dataclass
class BatchSteps:
    """Batched classic steps: each pass's median step, per engine, passes alternating."""

    batch: int
    steps: int  # timed steps a pass
    backend: str
    speculative_ms: list[float]
    classic_ms: list[float]


def batch_step_times(engine: Any, prompts: list[list[int]], steps: int) -> list[float]:
    """Seconds of each classic step over `prompts` decoded together by `engine`."""
    from drafter.batch import BatchDecoder
    from drafter.decoding import GenerationStats
    from drafter.sampling import SamplingParams

    decoder = BatchDecoder(engine)
    sequences = [
        decoder.start(prompt, steps + 2, SamplingParams(), GenerationStats(), ignore_eos=True)
        for prompt in prompts
    ]
    for sequence in sequences:
        while sequence.prefill is not None:
            decoder.advance_prefill(sequence)
    times = []
    for _ in range(steps):
        began = time.perf_counter()
        decoder.step(sequences, 1)
        times.append(time.perf_counter() - began)
    decoder.release()  # drops the batch's queued forward: no sequence queues its own
    return times


def profile_batch(
    speculative: Any, classic: Any, args: argparse.Namespace, backend: str
) -> BatchSteps:
    # Distinct prompts, so no request starts from another's cached prefix.
    texts = [f"{i}. {args.prompt}" for i in range(args.batch)]
    prompts = [speculative.tokenizer.encode(text) for text in texts]
    result = BatchSteps(args.batch, args.max_tokens, backend, [], [])
    for engine in (speculative, classic):  # warm: each engine's first batch builds kernels
        batch_step_times(engine, prompts, 8)
    for _ in range(args.repeats):
        for engine, passes in ((speculative, result.speculative_ms), (classic, result.classic_ms)):
            times = batch_step_times(engine, prompts, args.max_tokens)
            passes.append(round(1000 * statistics.median(times), 3))
    return result


def batch_row(b: BatchSteps) -> str:
    spec, classic = statistics.median(b.speculative_ms), statistics.median(b.classic_ms)
    return (
        f"batch {b.batch} [{b.backend}], classic steps, median ms per pass of {b.steps}: "
        f"speculative engine {b.speculative_ms}, classic engine {b.classic_ms} "
        f"({spec / classic:.3f}x by medians)"
    )


def table_row(p: WidthProfile) -> str:
    stages = " ".join(f"{k}={v:.2f}" for k, v in p.stages_ms.items())
    return (
        f"width {p.width} [{p.backend}, {p.attention} keys, {p.linear} linear, "
        f"{p.activation} activation, {p.heap} heap]: "
        f"round {p.round_ms:.2f} ms warm "
        f"({p.round_ms_cold:.1f} cold, max {p.max_round_ms:.1f}, "
        f"{p.rounds_over_2x_median} over 2x median) | verify {p.verify_ms:.2f} + draft "
        f"{p.draft_ms:.2f} ms, rest {100 * p.rest_share:.0f}% | step {p.step_ms:.2f} ms | "
        f"acceptance {p.acceptance_length:.2f} | stages {stages} | full collections "
        f"{len(p.full_collections_ms)}, max {max(p.full_collections_ms, default=0.0):.1f} ms | "
        f"KV {p.kv}, {len(p.growth_rounds)} rounds grew a buffer"
    )
