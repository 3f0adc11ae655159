"""The prompt cache: the target's state after a prompt, reused by later requests.

In a chat every turn resends the whole conversation. After each prefill the engine
stores a copy of the target's caches (and, when speculating, the tapped features of
every prompt row, which the drafter's first round reads as context) under the prompt's
tokens. A later prompt that shares a prefix with an entry starts from a copy of it,
trimmed to the shared prefix where the cache type allows (KVCache does; a Gated
DeltaNet state or a rotating window cannot be trimmed, so those entries serve only
prompts they are a whole prefix of), and prefills only the rest.

Entries are copied in and out (`copy.deepcopy`, as mlx-lm's own LRUPromptCache does),
so decoding never touches a stored state, and an entry is stored only once its prefill
has finished: nothing half-written is ever looked up. Least recently used entries are
evicted to stay within the byte budget.

A hit must not change output. It does not wherever the target computes a prompt row
the same whatever forward it is part of, as MLX's own CPU kernels do in float32 (the
tests). In bf16 on an H200 it does not: a row of a multi-row prefill and the same row
fed on its own differ in rounding, and a greedy request served from a hit read
differently from its cold run (6 of 12 held-out prompts,
docs/benchmark_results/h200-served-split.md); nor in float32 with MKL or OpenBLAS on an
AMD EPYC.
So the loader checks at startup (`hits_are_exact`); where hits are not exact, a hit
restores only whole prefill chunks (decoding.prefill_step). Every prefill starts at 0
or at a restored multiple of the step and runs whole steps, so those rows come out of
the very forwards a cold prefill runs, and the rest is recomputed as the cold prefill
does.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

from drafter.acceptance import common_prefix
from drafter.decoding import prefill
from drafter.forward import Forward


@dataclass
class Entry:
    tokens: tuple[int, ...]
    cache: list[Any]  # the target's caches after prefilling `tokens`; never mutated
    features: mx.array | None  # (1, len(tokens), taps * hidden) when speculating
    nbytes: int


@dataclass
class Restored:
    """A copy of an entry's state, trimmed to the `tokens` prompt tokens it covers."""

    cache: list[Any]
    features: mx.array | None
    tokens: int


def state_bytes(cache: list[Any], features: mx.array | None) -> int:
    arrays = [a for _, a in tree_flatten([c.state for c in cache]) if isinstance(a, mx.array)]
    return sum(a.nbytes for a in arrays) + (0 if features is None else features.nbytes)


class PromptCache:
    """An LRU of prompt states within `max_bytes`; counts hits, misses, cached tokens.

    step: a hit restores a multiple of this many prompt rows: 1 (any prefix) where
    hits are exact, else the prefill's chunk (see the module docstring)."""

    def __init__(self, max_bytes: int, step: int = 1) -> None:
        self.max_bytes = max_bytes
        self.step = step
        self.entries: OrderedDict[tuple[int, ...], Entry] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.cached_tokens = 0  # prompt tokens served from the cache, all requests

    @property
    def nbytes(self) -> int:
        return sum(entry.nbytes for entry in self.entries.values())

    def usable(self, entry: Entry, prompt: list[int], features: bool) -> int:
        """How many prompt tokens `entry` can serve (0: none). One prompt token is always
        left to prefill: its logits start decoding."""
        if features and entry.features is None:
            return 0
        shared = min(common_prefix(entry.tokens, prompt), len(prompt) - 1)
        shared -= shared % self.step
        if shared == 0:
            return 0
        if shared < len(entry.tokens) and not can_trim_prompt_cache(entry.cache):
            return 0
        return shared

    def fetch(self, prompt: list[int], features: bool) -> Restored | None:
        """The longest usable prefix's state, copied, or None (a miss)."""
        best, best_n = None, 0
        for entry in self.entries.values():
            n = self.usable(entry, prompt, features)
            if n > best_n:
                best, best_n = entry, n
        if best is None:
            self.misses += 1
            return None
        self.entries.move_to_end(best.tokens)
        self.hits += 1
        self.cached_tokens += best_n
        cache = copy.deepcopy(best.cache)
        trim_prompt_cache(cache, len(best.tokens) - best_n)
        kept = None if best.features is None else best.features[:, :best_n]
        return Restored(cache, kept, best_n)

    def insert(self, prompt: list[int], cache: list[Any], features: mx.array | None) -> None:
        """Store a copy of the state after prefilling `prompt` (evaluated first). A prompt
        shorter than the step is not stored: no later prompt could restore any of it."""
        if len(prompt) < self.step:
            return
        mx.eval([c.state for c in cache], *([] if features is None else [features]))
        nbytes = state_bytes(cache, features)
        if nbytes > self.max_bytes:
            return
        tokens = tuple(prompt)
        self.entries.pop(tokens, None)
        if can_trim_prompt_cache(cache):  # a shorter entry on this path is now redundant
            for key in [k for k in self.entries if k == tokens[: len(k)]]:
                del self.entries[key]
        self.entries[tokens] = Entry(tokens, copy.deepcopy(cache), features, nbytes)
        while self.nbytes > self.max_bytes:
            self.entries.popitem(last=False)


PROBE_TEXT = (
    "A prompt cache check: the rows of this text, prefilled whole and in two parts, "
    "should come out the same. Any plain text of a few dozen tokens will do."
)


def hits_are_exact(
    forward: Forward, make_cache: Callable[[], list[Any]], prompt: list[int]
) -> bool:
    """Whether prefilling `prompt` in two parts gives the state one forward gives, bit
    for bit: the last row's logits and every layer's cached state.

    A hit is exactly that: the entry's rows came out of an earlier prefill of another
    length, and the rest of the prompt goes through a forward of its own. Both splits
    a hit makes are tried: all rows but the last (the same prompt again) and half (a
    shared prefix)."""

    def state_after(*parts: list[int]) -> list[mx.array]:
        cache = make_cache()
        for part in parts:
            logits = prefill(forward, part, cache)
        state = [a for _, a in tree_flatten([c.state for c in cache]) if isinstance(a, mx.array)]
        return [logits, *state]

    whole = state_after(prompt)
    for split in (len(prompt) - 1, len(prompt) // 2):
        parts = state_after(prompt[:split], prompt[split:])
        if not all(mx.array_equal(a, b).item() for a, b in zip(whole, parts, strict=True)):
            return False
    return True
