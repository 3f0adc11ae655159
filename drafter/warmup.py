"""Warm up at startup what the first requests would otherwise pay for.

MLX compiles each kernel shape on first use (a first speculative round of 9.4 s
was measured on an H200), and with stable attention (drafter/attention.py)
cuDNN builds one graph per (rows, cache buffer length) on CUDA. A short request
of each decode path compiles the kernels; then one short request per buffer
length up to WARM_KEYS builds the verify and drafter graphs that requests of
up to that many tokens will meet (stable attention), and has MLX's allocator
hand out a buffer of each cache size once (the whole-step sizes requests reserve
at their prefill, drafter/attention.py: reserve).

With vector attention, the CUDA default, one round per process stayed slow: the
one whose verify block first crosses the vector kernel's two-pass threshold
(VECTOR_TWO_PASS_KEYS). In all nine H200 profile processes, warmed up or not, KV
reserved or not, that round took 1.98-2.61x the median (17-36 ms), and where
recorded it ended at 1,023 cached rows (h200-kv-steadiness.md). Such a round runs
one-pass chunks, then two-pass ones: a mix no warm-up request met, each starting
below or above the threshold. So one short request per row of a block at which
the crossing can fall now starts just under it. Our reading, not yet measured.

The warm-up leaves the prompt cache as it found it: its requests are not a
client's, and a cached warm-up prefix would change how a later prompt is
prefilled. The whole is bounded by a time budget.
"""

from __future__ import annotations

import time

from drafter.attention import STEP, VECTOR_TWO_PASS_KEYS  # 256-row steps; 1,024 keys
from drafter.engine import Engine
from drafter.sampling import SamplingParams

WARM_UP_BUDGET_S = 30.0
WARM_KEYS = 2048  # buffer lengths 256, 512, ... up to here
TEXT = "def warm_up(x):\n    return x * 2  # a short prompt\n"


def warm_up(engine: Engine, budget_s: float = WARM_UP_BUDGET_S) -> float:
    """Run the warm-up requests; returns the seconds it took."""
    start = time.perf_counter()
    saved, engine.prompt_cache = engine.prompt_cache, None
    try:
        base = engine.tokenizer.encode(TEXT)
        width = engine.block_size or 1
        run(engine, base, 2 * width + 2)
        if engine.speculative:
            for prompt in warm_prompts(base, width, engine.attention, engine.context_length):
                if time.perf_counter() - start > budget_s:
                    break
                run(engine, prompt, 2 * width + 2)
    finally:
        engine.prompt_cache = saved
    return round(time.perf_counter() - start, 3)


def warm_prompts(base: list[int], width: int, attention: str, limit: int) -> list[list[int]]:
    """The speculative warm-up's prompts (`base` repeated and cut): one that fills the
    cache buffer to each whole-step length up to WARM_KEYS, 248 rows short of it, so
    its rounds run in that buffer; then, with vector attention, one per row of the
    first verify block (anchor + width drafts) that can be its first past
    VECTOR_TWO_PASS_KEYS keys. None longer than `limit` (the context length)."""
    lengths = [keys - STEP + 8 for keys in range(2 * STEP, min(WARM_KEYS, limit) + 1, STEP)]
    if attention == "vector" and VECTOR_TWO_PASS_KEYS + 2 * width + 2 <= limit:
        # A prompt of P tokens: the first block's rows read P + 1 ... P + width + 1 keys.
        lengths += [VECTOR_TWO_PASS_KEYS - row for row in range(width + 1)]
    longest = base * (max(lengths, default=0) // max(1, len(base)) + 1)
    return [longest[:n] for n in lengths]


def run(engine: Engine, prompt: list[int], tokens: int) -> None:
    params = SamplingParams()
    for _ in engine.classic_generate(prompt, tokens, params, ignore_eos=True):
        pass
    if engine.speculative:
        for _ in engine.generate(prompt, tokens, params, ignore_eos=True):
            pass
