"""Warm up at startup what the first requests would otherwise pay for.

MLX compiles each kernel shape on first use and records CUDA graphs per kernel
sequence. Short requests through the served decoder (alone, classic and speculative, and a
batched pair) compile the kernels; then one short request per buffer length up to
WARM_KEYS builds the verify and drafter graphs that requests of up to that many tokens
meet, and has MLX's allocator hand out a buffer of each cache size once (the
whole-step sizes requests reserve at their prefill, drafter/attention.py: reserve).

With vector attention (the CUDA default) a round whose verify block straddles the
vector kernel's two-pass threshold (VECTOR_TWO_PASS_KEYS) mixes one-pass and two-pass
attention: a kernel sequence MLX has not recorded as a CUDA graph yet, slow the first
time it runs in a process, and different for a request's first round (which takes in
no new context rows) than for later ones. So the warm-up runs requests until a round
that is not its request's first has started at every cache length whose block
straddles the threshold (`crossing_rows`; h200-kv-steadiness.md, h200-warm-crossing.md).

The warm-up leaves the prompt cache as it found it: its requests are not a client's,
and a cached warm-up prefix would change how a later prompt is prefilled. The whole is
bounded by a time budget.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

from drafter.attention import STEP
from drafter.batch import decode_together
from drafter.engine import Engine
from drafter.sampling import SamplingParams
from drafter.vector_rows import VECTOR_TWO_PASS_KEYS

WARM_UP_BUDGET_S = 30.0
WARM_KEYS = 2048  # buffer lengths 256, 512, ... up to here
TEXT = "def warm_up(x):\n    return x * 2  # a short prompt\n"


@dataclass(frozen=True)
class WarmUp:
    seconds: float
    # crossing rows (`crossing_rows`) no later round started at: the budget ran out or
    # the context is too short; 0 also where there are none to meet (no vector attention)
    unmet: int


def warm_up(engine: Engine, budget_s: float = WARM_UP_BUDGET_S) -> WarmUp:
    """Run the warm-up requests; returns the seconds they took and what they left unmet."""
    start = time.perf_counter()
    unmet: set[int] = set()
    saved, engine.prompt_cache = engine.prompt_cache, None
    try:
        base = engine.tokenizer.encode(TEXT)
        width = engine.block_size or 1
        run(engine, base, 2 * width + 2)
        run_pair(engine, base, 2 * width + 2)
        if engine.speculative:
            deadline = start + budget_s
            for prompt in warm_prompts(base, width, engine.context_length):
                if time.perf_counter() > deadline:
                    break
                run(engine, prompt, 2 * width + 2)
            if engine.attention == "vector":
                unmet = warm_crossings(engine, base, width, deadline)
    finally:
        engine.prompt_cache = saved
    return WarmUp(round(time.perf_counter() - start, 3), len(unmet))


def warm_prompts(base: list[int], width: int, limit: int) -> list[list[int]]:
    """The speculative warm-up's prompts (`base` repeated and cut): one that fills the
    cache buffer to each whole-step length up to WARM_KEYS, 248 rows short of it, so
    its rounds run in that buffer. None longer than `limit` (the context length)."""
    lengths = [keys - STEP + 8 for keys in range(2 * STEP, min(WARM_KEYS, limit) + 1, STEP)]
    return [repeat(base, n) for n in lengths if n + 2 * width + 2 <= limit]


def crossing_rows(width: int) -> range:
    """Target cache lengths at a round's start at which the round straddles the
    two-pass line. A round that starts with R cached rows verifies `width` rows, row i
    over R + 1 + i keys, each by the variant of MLX's vector kernel that its own key
    count picks (drafter/vector_rows.py: causal_rows); from R = line - width + 1 to
    R = line - 1 the block is one-pass rows and two-pass rows. One row more on either
    side for the drafter's block, which reads about R + width keys and flips alone."""
    line = VECTOR_TWO_PASS_KEYS
    return range(line - width, line + 1)


def warm_crossings(engine: Engine, base: list[int], width: int, deadline: float) -> set[int]:
    """Requests, each prompt a token shorter than the last, until a round that is not
    its request's first has started at each of `crossing_rows`; returns the lengths
    still unmet (at the deadline, or after 4 * (width + 1) requests).

    Every prompt is `base` repeated, cut to end where `base` ends (`ending_with`). The
    text that follows, and so how many tokens each round emits, is then the same in
    every request, and each round starts one row earlier than in the request before:
    a few requests meet every length. (Prompts that start where `base` starts keep
    the repeated text in step with the rows instead, and rounds that accept 5 to 8
    tokens of it skip the same rows in every request: 4 of 7 stayed unmet on the
    H200, h200-warm-crossing.md.) The longest prompt's first round ends below the
    line, and each request runs two blocks past it."""
    todo = set(crossing_rows(width))
    longest = VECTOR_TWO_PASS_KEYS - 2 * (width + 1) - 1
    for length in range(longest, longest - 4 * (width + 1), -1):
        tokens = VECTOR_TWO_PASS_KEYS - length + 2 * (width + 1)
        if not todo or time.perf_counter() > deadline or length + tokens > engine.context_length:
            break
        prompt = ending_with(base, length)
        outs = engine.generate(prompt, tokens, SamplingParams(), ignore_eos=True)
        todo -= set(later_round_starts(length, [len(out) for out in outs]))
    return todo


def later_round_starts(length: int, sizes: list[int]) -> list[int]:
    """The target's cached rows at the start of each round after a request's first.
    sizes: how many tokens each yield of `Engine.generate` held (the first, the
    prefill's token). A round starts with the prompt and every token emitted before
    it but the last, its anchor."""
    emitted = list(itertools.accumulate(sizes))
    return [length + before - 1 for before in emitted[1:-1]]


def repeat(base: list[int], n: int) -> list[int]:
    """The first n tokens of `base` repeated."""
    return tiled(base, n)[:n]


def ending_with(base: list[int], n: int) -> list[int]:
    """The last n tokens of `base` repeated: they end where `base` ends."""
    text = tiled(base, n)
    return text[len(text) - n :]


def tiled(base: list[int], n: int) -> list[int]:
    """`base` repeated in whole copies to at least n tokens."""
    return base * (n // max(1, len(base)) + 1)


def run(engine: Engine, prompt: list[int], tokens: int) -> None:
    """The request alone, classic and at the loaded width."""
    params = SamplingParams()
    for _ in engine.generate(prompt, tokens, params, ignore_eos=True, width=None):
        pass
    if engine.speculative:
        for _ in engine.generate(prompt, tokens, params, ignore_eos=True):
            pass


def run_pair(engine: Engine, prompt: list[int], tokens: int) -> None:
    """Two of the request batched, as concurrent requests decode."""
    decode_together(engine, [prompt, prompt], tokens, SamplingParams())
