"""`draftwise bench --in-process`: a quick sweep in this process, widths interleaved.

Loads the pair once with the same loader the server uses, then runs every arm
(classic, then each width: one Engine, the width chosen per call) on every
prompt, arms interleaved inside each repetition so drift (thermal, other load)
hits all arms alike, EOS ignored so every arm generates exactly `max_tokens`
tokens. The samples become the same record as the server sweep. Faster than one
server per arm, but it measures the engine, not the HTTP path.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from hashlib import sha256
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.blas import BLAS_ENV, BlasSettingError, reexec_with_chosen_blas
from server.settings import default_cache_dir
from server.tooling.bench import (
    BenchConfig,
    BenchError,
    Progress,
    default_name,
    host_info,
    load_average,
    sweep_setup,
)
from server.tooling.bench_record import Arm, Request, Run, build_record

if TYPE_CHECKING:
    from drafter.engine import Engine

IN_PROCESS_MODE = "in-process (bench_inprocess.measure_widths, arms interleaved per repetition)"


@dataclass(frozen=True)
class Sample:
    """One greedy request of one arm."""

    width: int | None  # None: classic decode
    repeat: int
    prompt_index: int
    tokens: int
    seconds: float  # whole request: prefill + decode
    prefill_seconds: float  # until the first token is available
    rounds: int
    drafted: int
    accepted: int
    text: str


def run_once(
    engine: Engine, prompt: list[int], max_tokens: int, width: int | None, repeat: int, index: int
) -> Sample:
    from drafter.decoding import GenerationStats
    from drafter.sampling import SamplingParams

    stats = GenerationStats()
    tokens: list[int] = []
    start = time.perf_counter()
    first = 0.0
    steps = engine.generate(
        prompt, max_tokens, SamplingParams(), stats, ignore_eos=True, width=width
    )
    for step in steps:
        if not tokens:
            first = time.perf_counter() - start
        tokens.extend(t.id for t in step)
    seconds = time.perf_counter() - start
    text = engine.tokenizer.decode(tokens)
    return Sample(
        width, repeat, index, len(tokens), seconds, first, stats.rounds, stats.drafted,
        stats.accepted, text,
    )  # fmt: skip


def measure_widths(
    engine: Engine,
    widths: Sequence[int | None],
    prompts: Sequence[list[int] | str],
    max_tokens: int,
    n: int,
    warmup: int = 1,
    on_progress: Callable[[str], None] | None = None,
) -> list[Sample]:
    """Greedy runs of every arm on every prompt, n times, arms interleaved."""
    if any(w is not None for w in widths) and engine.drafter is None:
        raise ValueError("measuring draft widths needs an engine with a drafter")
    encoded = [engine.tokenizer.encode(p) if isinstance(p, str) else list(p) for p in prompts]
    for _ in range(warmup):
        for width in widths:
            run_once(engine, encoded[0], max_tokens, width, -1, 0)
    samples = []
    for repeat in range(n):
        for index, prompt in enumerate(encoded):
            for width in widths:
                sample = run_once(engine, prompt, max_tokens, width, repeat, index)
                samples.append(sample)
                if on_progress is not None:
                    label = "classic" if width is None else f"width {width}"
                    decode = sample.seconds - sample.prefill_seconds
                    rate = (sample.tokens - 1) / decode if decode > 0 else 0.0
                    on_progress(f"repeat {repeat} prompt {index} {label}: {rate:.2f} tok/s")
    return samples


def use_chosen_blas(config: BenchConfig) -> str:
    """Before MLX loads: re-exec with the BLAS --blas names (no-op if already done)."""
    try:
        return reexec_with_chosen_blas(sys.orig_argv, {**os.environ, BLAS_ENV: config.blas})
    except BlasSettingError as error:
        raise BenchError(f"--blas {config.blas}: {error}") from error


def arms_from_samples(
    samples: Sequence[Sample], widths: Sequence[int | None], served: dict[str, Any]
) -> list[Arm]:
    """One Arm per width (None first); a Run per repetition, prompts in order."""
    arms = []
    for width in widths:
        mine = [s for s in samples if s.width == width]
        runs = []
        for repeat in sorted({s.repeat for s in mine}):
            picked = sorted((s for s in mine if s.repeat == repeat), key=lambda s: s.prompt_index)
            runs.append(Run(tuple(request_from_sample(s) for s in picked)))
        label = "classic" if width is None else f"width {width}"
        arm_served = {**served, "speculative": width is not None, "block_size": width}
        arms.append(Arm(label, width, runs, [], arm_served))
    return arms


def request_from_sample(sample: Sample) -> Request:
    return Request(
        prompt_index=sample.prompt_index,
        tokens=sample.tokens,
        e2e_s=sample.seconds,
        ttft_s=sample.prefill_seconds,
        rounds=sample.rounds,
        drafted=sample.drafted,
        accepted=sample.accepted,
        sha256=sha256(sample.text.encode()).hexdigest(),
    )


def run_in_process(config: BenchConfig, progress: Progress) -> dict[str, Any]:
    """Load once, measure every arm interleaved, return the record (not yet written)."""
    from drafter.loading import LoadOptions, load_engine

    if not config.widths:
        raise BenchError("need at least one width")
    if config.compare_drafter:
        raise BenchError("--compare-drafter needs a server per arm: drop --in-process")
    if config.compare_server_args:
        raise BenchError("--compare-server-arg needs a server per arm: drop --in-process")
    started = datetime.now(UTC)
    cache_dir = Path(config.cache_dir) if config.cache_dir else default_cache_dir()
    options = LoadOptions(
        cache_dir=cache_dir,
        model=config.model,
        draft_model=config.draft_model,
        # Any width turns speculation on for loading (the drafter loads); each arm's
        # width is chosen per call.
        draft_block_size=str(config.widths[0]),
        exactness="off",
        dtype=config.dtype or "auto",
        freeze_heap=True,  # as a server does
    )
    host = host_info(os.environ)
    progress("loading the pair in this process")
    loaded = load_engine(options)
    if loaded.engine.drafter is None:
        raise BenchError("the pair has no drafter to measure (--draft-model none?)")
    served = {k: v for k, v in loaded.speculative_config().items() if k != "block_size"}
    served["source"] = "bench --in-process"
    widths: list[int | None] = [None, *config.widths]
    progress(f"measuring classic and widths {list(config.widths)}, n={config.n}, interleaved")
    samples = measure_widths(
        loaded.engine,
        widths,
        list(config.prompts),
        config.max_tokens,
        config.n,
        warmup=config.warmup,
        on_progress=progress,
    )
    arms = arms_from_samples(samples, widths, served)
    host["load_average_end"] = load_average()
    setup = sweep_setup(config, served, started, IN_PROCESS_MODE)
    name = config.name or default_name(host, setup, started)
    record = build_record(name=name, arms=arms, setup=setup, host=host)
    record["warmup"] = config.warmup  # measure_widths runs them but does not return them
    return record
