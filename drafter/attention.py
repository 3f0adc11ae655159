"""Shape-stable attention for multi-row queries (the verify block, the drafter block).

MLX's CUDA backend sends every attention query longer than one row to cuDNN,
which builds a graph per distinct (Q, K, V, mask) shape and stride set
(`build_sdpa_cache_key` in mlx/backend/cuda/scaled_dot_product_attention.cpp)
and caches 256 of them per thread. A speculative round reads K/V of a new
length every round, so with exact-length keys every round builds graphs
(about 100 ms each) and one long request evicts what the next one needs.

mlx-lm's `KVCache` already allocates its buffer in steps of 256 rows and hands
out the slice `keys[..., :offset, :]`. `StableKVCache` hands out the whole
buffer instead, for multi-row updates only, and its `make_mask` hides the
unused tail with an additive mask (bottom-right causal over the real keys).
It also grows by whole steps, so buffer lengths stay multiples of 256 and the
graphs of a few lengths (warmed at startup) serve every request.
The shapes a graph is keyed by then repeat for up to 256 tokens. One-row
queries (classic decode) and the first fill keep mlx-lm's exact-length path.
Nothing of the model's math is copied: mlx-lm's attention asks the cache for
its mask and its keys, and this cache answers differently.

Keys past the offset are stale rows of a rejected draft or zeros; the mask
gives them -inf, so they get exactly zero weight.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import KVCache, make_prompt_cache

MAX_STABLE_ROWS = 64  # wider updates (prefill chunks) keep the exact-length path
STEP = KVCache.step  # mlx-lm grows its buffers by 256 rows


class StableKVCache(KVCache):
    """A KVCache whose multi-row reads present the whole allocated buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.full_buffer = False  # whether the last update returned the whole buffer

    def stable(self, rows: int) -> bool:
        return self.keys is not None and 1 < rows <= MAX_STABLE_ROWS

    def allocation_after(self, rows: int) -> int:
        """The buffer length once `rows` more rows are written: a multiple of 256."""
        size = self.keys.shape[2]
        if self.offset + rows <= size:
            return size
        return size + self.step * ((self.offset + rows - size + self.step - 1) // self.step)

    def grow(self, rows: int) -> None:
        """Make room for `rows` more rows by appending whole steps to the buffer.
        (KVCache cuts the buffer to the offset before growing, which leaves lengths
        that are no multiple of 256: each would be one more graph on CUDA.)"""
        size = self.allocation_after(rows) - self.keys.shape[2]
        if size:
            B, heads, _, k_dim = self.keys.shape
            v_dim = self.values.shape[3]
            self.keys = mx.concatenate(
                [self.keys, mx.zeros((B, heads, size, k_dim), self.keys.dtype)], 2
            )
            self.values = mx.concatenate(
                [self.values, mx.zeros((B, heads, size, v_dim), self.values.dtype)], 2
            )

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None) -> Any:
        if window_size is not None or not self.stable(N):
            return super().make_mask(N, return_array=return_array, window_size=window_size)
        return tail_mask(self.offset, N, self.allocation_after(N), self.keys.dtype, causal=True)

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        self.full_buffer = self.stable(keys.shape[2])
        if self.keys is not None:
            self.grow(keys.shape[2])  # then KVCache writes in place
        return super().update_and_fetch(keys, values)

    def keys_and_values(self) -> tuple[mx.array, mx.array]:
        if self.full_buffer:
            return self.keys, self.values
        return super().keys_and_values()


def tail_mask(offset: int, rows: int, length: int, dtype: mx.Dtype, causal: bool) -> mx.array:
    """Additive mask (rows, length) over a buffer whose first offset + rows keys are real.

    Query i sits at absolute position offset + i. Causal: it sees keys j <= offset + i;
    else every real key. The rest of the buffer gets -inf."""
    keys = mx.arange(length)[None]
    limit = offset + (mx.arange(rows)[:, None] if causal else rows - 1)
    return mx.where(keys <= limit, mx.array(0, dtype), mx.array(-mx.inf, dtype))


def whole_steps(rows: int) -> int:
    """`rows` rounded up to whole 256-row steps."""
    return STEP * ((rows + STEP - 1) // STEP)


def batch_key_length(longest: int, stable: bool) -> int:
    """How many key rows a batched forward presents when its longest request has
    `longest`: with stable attention, whole 256-row steps (so cuDNN's graphs repeat)."""
    return whole_steps(longest) if stable else longest


def right_padded(buffers: list[mx.array], lengths: list[int], width: int) -> mx.array:
    """Each request's first `length` rows (axis 2), zero-padded on the right to `width`
    and stacked on the batch axis: each request's keys sit where they sit alone."""
    rows = []
    for buffer, length in zip(buffers, lengths, strict=True):
        pad = [(0, 0), (0, 0), (0, width - length), (0, 0)]
        rows.append(mx.pad(buffer[..., :length, :], pad))
    return mx.concatenate(rows, axis=0)


def make_cache(model: nn.Module, stable: bool) -> list[Any]:
    """mlx-lm's prompt cache for `model`, with each plain KVCache made stable if asked."""
    cache = make_prompt_cache(model)
    if not stable:
        return cache
    return [StableKVCache() if type(entry) is KVCache else entry for entry in cache]
