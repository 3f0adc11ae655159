"""In-process throughput measurement: classic decode vs each draft width, one run.

Arms (classic = width None, then each width) are interleaved within every
repetition so drift (thermal, other load) hits all arms alike. EOS is
ignored so every arm generates exactly `max_tokens` tokens per prompt.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from drafter.decoding import GenerationStats
from drafter.engine import Engine
from drafter.sampling import SamplingParams

DEFAULT_PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome.\n",
    "Explain step by step: a train travels 120 km in 1.5 hours. What is its average speed?\n",
    "List five uses of binary search trees and describe each in one sentence.\n",
]


@dataclass(frozen=True)
class Sample:
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

    @property
    def decode_seconds(self) -> float:
        return self.seconds - self.prefill_seconds

    @property
    def tokens_per_second(self) -> float:
        """Decode throughput: tokens after the first over the time after the first."""
        return (self.tokens - 1) / self.decode_seconds if self.decode_seconds > 0 else 0.0


@dataclass(frozen=True)
class Summary:
    width: int | None
    runs: int
    tokens_per_second: list[float]  # one per repeat, summed over prompts
    acceptance_length: float  # tokens per round (accepted drafts + 1)
    seconds_per_round: float

    @property
    def mean(self) -> float:
        return statistics.fmean(self.tokens_per_second)


def arm_engine(engine: Engine, width: int | None) -> Engine:
    return Engine(
        engine.model,
        engine.tokenizer,
        model_id=engine.model_id,
        context_length=engine.context_length,
        drafter=engine.drafter if width is not None else None,
        block_size=width,
    )


def run_once(
    engine: Engine, prompt: list[int], max_tokens: int, width: int | None, repeat: int, index: int
) -> Sample:
    stats = GenerationStats()
    tokens: list[int] = []
    start = time.perf_counter()
    first = 0.0
    for step in engine.generate(prompt, max_tokens, SamplingParams(), stats, ignore_eos=True):
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
    prompts: Sequence[list[int]] | Sequence[str],
    max_tokens: int,
    n: int,
    warmup: int = 1,
    on_progress: Callable[[str], None] | None = None,
) -> list[Sample]:
    """Greedy runs of every arm on every prompt, n times, arms interleaved."""
    if any(w is not None for w in widths) and engine.drafter is None:
        raise ValueError("measuring draft widths needs an engine with a drafter")
    encoded = [engine.tokenizer.encode(p) if isinstance(p, str) else list(p) for p in prompts]
    arms = {width: arm_engine(engine, width) for width in widths}
    for _ in range(warmup):
        for width, arm in arms.items():
            run_once(arm, encoded[0], max_tokens, width, -1, 0)
    samples = []
    for repeat in range(n):
        for index, prompt in enumerate(encoded):
            for width, arm in arms.items():
                sample = run_once(arm, prompt, max_tokens, width, repeat, index)
                samples.append(sample)
                if on_progress is not None:
                    label = "classic" if width is None else f"width {width}"
                    on_progress(
                        f"repeat {repeat} prompt {index} {label}: "
                        f"{sample.tokens_per_second:.2f} tok/s"
                    )
    return samples


def summarize(samples: Sequence[Sample]) -> list[Summary]:
    """Per arm: decode tok/s per repeat (all prompts pooled), acceptance, time per round."""
    widths = list(dict.fromkeys(s.width for s in samples))
    summaries = []
    for width in widths:
        arm = [s for s in samples if s.width == width]
        per_repeat = []
        for repeat in sorted({s.repeat for s in arm}):
            runs = [s for s in arm if s.repeat == repeat]
            decode = sum(s.decode_seconds for s in runs)
            per_repeat.append(sum(s.tokens - 1 for s in runs) / decode if decode > 0 else 0.0)
        rounds = sum(s.rounds for s in arm)
        accepted = sum(s.accepted for s in arm)
        summaries.append(
            Summary(
                width=width,
                runs=len(arm),
                tokens_per_second=per_repeat,
                acceptance_length=(accepted + rounds) / rounds if rounds else 1.0,
                seconds_per_round=(
                    sum(s.decode_seconds for s in arm) / rounds
                    if rounds
                    else sum(s.decode_seconds for s in arm) / max(1, sum(s.tokens - 1 for s in arm))
                ),
            )
        )
    return summaries


def format_table(summaries: Sequence[Summary]) -> str:
    classic = next((s.mean for s in summaries if s.width is None), None)
    lines = ["arm       tok/s   (min..max)          x classic  accept len  ms/round"]
    for s in summaries:
        label = "classic" if s.width is None else f"width {s.width}"
        speedup = f"{s.mean / classic:.2f}x" if classic else "-"
        spread = f"({min(s.tokens_per_second):.2f}..{max(s.tokens_per_second):.2f})"
        lines.append(
            f"{label:<9} {s.mean:7.2f} {spread:<19} {speedup:>9}  "
            f"{s.acceptance_length:10.2f}  {s.seconds_per_round * 1000:8.2f}"
        )
    return "\n".join(lines)
