"""Warm up at startup what the first requests would otherwise pay for.

MLX compiles each kernel shape on first use (a first speculative round of 9.4 s
was measured on an H200), and with stable attention (drafter/attention.py)
cuDNN builds one graph per (rows, cache buffer length) on CUDA. A short request
of each decode path compiles the kernels; then one short request per buffer
length up to WARM_KEYS builds the verify and drafter graphs that requests of
up to that many tokens will meet (stable attention), and has MLX's allocator
hand out a buffer of each cache size once (the whole-step sizes requests reserve
at their prefill, drafter/attention.py: reserve). The second is for vector attention,
the CUDA default, and is our reading, not yet measured: in two H200 profiles
(h200-round-steadiness-heap.md) 8-10 of 1,956 rounds took 27-41 ms against a
13 ms median, at the same rounds in both processes, and no garbage collection
ran. That points at a first-time event that repeats with the sequence of cache
lengths. The whole is bounded by a time budget.
"""

from __future__ import annotations

import time

from drafter.attention import STEP  # the cache buffer grows in steps of this many rows (256)
from drafter.engine import Engine
from drafter.sampling import SamplingParams

WARM_UP_BUDGET_S = 30.0
WARM_KEYS = 2048  # buffer lengths 256, 512, ... up to here
TEXT = "def warm_up(x):\n    return x * 2  # a short prompt\n"


def warm_up(engine: Engine, budget_s: float = WARM_UP_BUDGET_S) -> float:
    """Run the warm-up requests; returns the seconds it took."""
    start = time.perf_counter()
    base = engine.tokenizer.encode(TEXT)
    width = engine.block_size or 1
    run(engine, base, 2 * width + 2)
    if engine.speculative:
        for keys in range(2 * STEP, min(WARM_KEYS, engine.context_length) + 1, STEP):
            if time.perf_counter() - start > budget_s:
                break
            # A prompt that fills the buffer to `keys` rows, then two rounds in it.
            prompt = (base * (keys // max(1, len(base)) + 1))[: keys - STEP + 8]
            run(engine, prompt, 2 * width + 2)
    return round(time.perf_counter() - start, 3)


def run(engine: Engine, prompt: list[int], tokens: int) -> None:
    params = SamplingParams()
    for _ in engine.classic_generate(prompt, tokens, params, ignore_eos=True):
        pass
    if engine.speculative:
        for _ in engine.generate(prompt, tokens, params, ignore_eos=True):
            pass
