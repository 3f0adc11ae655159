"""How attention runs (the verify block, the drafter block, on the CPU prefills
too), three ways.

- exact: mlx-lm's own path, keys of exact length (Metal, CPUs other than AMD + MKL).
- polyexp: the target's and the drafter's multi-row queries through
  drafter/polyexp.py, MLX's attention with an exp that vectorises (one-row steps,
  short contexts and long prefills keep MLX's own): the default on an AMD CPU
  under MKL (drafter/kernels.py).
- vector: MLX's CUDA vector kernel only, with cuDNN attention switched off
  (below): the CUDA default.

A mode is a cache class (`CACHES`): mlx-lm's attention passes the layer's cache to
`scaled_dot_product_attention`, which drafter/forward.py (`route_attention`) replaces by
`dispatch`.

Vector attention.

A multi-row forward cost far more than a one-row forward on an H200 even where
no graph was built (docs/benchmark_results/h200-vector-attention.md). cuDNN's
attention is a captured child graph in MLX's CUDA graph, and MLX re-uses an
executable graph only when it can update every node in place
(mlx/backend/cuda/device.cpp, `subgraph_to_key`; otherwise it instantiates
the graph anew at each commit): our reading of where the time goes.
MLX's vector kernel (`sdpa_vector`) serves queries of 1 to 3 rows, causal or
not, with no array mask, and builds nothing per shape. With
`MLX_CUDA_USE_CUDNN_SDPA=0` (read once per process) it is the kernel every such
query takes, the one-row classic step included, so:

- the target's causal verify block runs in one launch of that kernel's code over
  all its rows, each row by the variant (one-pass, two-pass) its own key count
  picks (drafter/vector_rows.py; h100-vector-rows.md). Where MLX cannot launch
  custom kernels it is split into chunks of at most 3 rows, each over its own exact-length keys
  (`chunked_attention`). Either way row i sees exactly the keys it sees in one
  causal call and is computed as a one-row step computes it: a verify row's
  logits equal classic decode's bit for bit where the linear layers match too
  (drafter/rowwise.py);
- the drafter's unmasked block attention folds its rows into heads
  (`folded_attention`): one one-row query per (head, row), one kernel call.

Longer queries (prefill) then take MLX's unfused attention.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import KVCache, make_prompt_cache

from drafter import polyexp, vector_rows
from drafter.vector_rows import VECTOR_ROWS

STEP = KVCache.step  # mlx-lm grows its buffers by 256 rows
MAX_BLOCK_ROWS = 64  # wider causal queries (prefill chunks) keep MLX's own attention


def whole_steps(rows: int) -> int:
    """`rows` rounded up to whole 256-row steps."""
    return STEP * ((rows + STEP - 1) // STEP)


def right_padded(buffers: list[mx.array], lengths: list[int], width: int) -> mx.array:
    """Each request's first `length` rows (axis 2), zero-padded on the right to `width`
    and stacked on the batch axis: each request's keys sit where they sit alone."""
    rows = []
    for buffer, length in zip(buffers, lengths, strict=True):
        pad = [(0, 0), (0, 0), (0, width - length), (0, 0)]
        rows.append(mx.pad(buffer[..., :length, :], pad))
    return mx.concatenate(rows, axis=0)


CUDNN_ENV = "MLX_CUDA_USE_CUDNN_SDPA"


class VectorKVCache(KVCache):
    """A KVCache whose multi-row causal attention goes through `causal_block`."""


class PolyexpKVCache(KVCache):
    """A KVCache whose attention calls go through polyexp.attention."""

    uses_polyexp = True  # what `uses_polyexp` reads (batch.SharedKV copies it)


def uses_polyexp(cache: Any) -> bool:
    """Whether a layer's cache (a PolyexpKVCache, or a batch's shared cache built from
    them) sends its attention to polyexp.attention."""
    return getattr(cache, "uses_polyexp", False)


def vector_chunks(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float
) -> list[mx.array]:
    """Causal attention of N query rows, the last N of exact-length keys, in chunks
    of at most VECTOR_ROWS rows (each a call MLX's vector kernel takes); returns each
    chunk's output, (B, H, rows, D). A chunk of rows [a, b) reads the keys up to the
    one of row b - 1, bottom-right causal: row a + j sees exactly what it sees in
    one causal call over all N rows."""
    rows, total = queries.shape[2], keys.shape[2]
    starts = list(range(0, rows, VECTOR_ROWS))
    # One split, not a slice per chunk (each slice is one more graph node).
    chunks = mx.split(queries, starts[1:], axis=2) if len(starts) > 1 else [queries]
    outs = []
    for a, chunk in zip(starts, chunks, strict=True):
        b = a + chunk.shape[2]
        end = total - rows + b
        # The last chunk reads every key: no slice.
        k, v = (keys, values) if end == total else (keys[..., :end, :], values[..., :end, :])
        outs.append(
            mx.fast.scaled_dot_product_attention(
                chunk, k, v, scale=scale, mask="causal" if b - a > 1 else None
            )
        )
    return outs


def chunked_attention(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float
) -> mx.array:
    """`vector_chunks`, joined row-major, (B, N, H, D), and handed back as a transposed
    view: the vector kernel writes each chunk in that layout, and the caller's
    `transpose(0, 2, 1, 3).reshape(B, N, -1)` (mlx-lm's attention) then reads it
    without a copy, as it reads a one-row step's output. Joined along the head-major
    axis instead, that reshape would copy every verify block once per layer."""
    outs = [out.transpose(0, 2, 1, 3) for out in vector_chunks(queries, keys, values, scale)]
    joined = outs[0] if len(outs) == 1 else mx.concatenate(outs, axis=1)  # (B, N, H, D)
    return joined.transpose(0, 2, 1, 3)


def causal_block(queries: mx.array, keys: mx.array, values: mx.array, scale: float) -> mx.array:
    """A causal verify block on MLX's vector kernels: all rows in one launch
    (drafter/vector_rows.py) where custom CUDA kernels run and the head size is one
    MLX builds them for, else `chunked_attention`. Either way each row is computed as
    a one-row step computes it."""
    if vector_rows.available() and vector_rows.fits(queries, keys, values):
        return vector_rows.causal_rows(queries, keys, values, scale)
    return chunked_attention(queries, keys, values, scale)


def folded_attention(queries: mx.array, keys: mx.array, values: mx.array, scale: float) -> mx.array:
    """Unmasked attention of L query rows as L * H one-row queries. Folded head
    h * L + i is row i of head h; under grouped-query attention it reads key head
    (h * L + i) // (L * H / H_kv) = h // (H / H_kv), the one head h reads."""
    B, H, L, D = queries.shape
    out = mx.fast.scaled_dot_product_attention(
        queries.reshape(B, H * L, 1, D), keys, values, scale=scale
    )
    return out.reshape(B, H, L, D)


def dispatch(original: Any) -> Any:
    """mlx-lm's `scaled_dot_product_attention`, routed by the layer's cache: a polyexp
    cache's calls to polyexp.attention, a VectorKVCache's causal verify blocks to
    `causal_block`; every other call to `original`."""

    def scaled_dot_product_attention(
        queries: mx.array,
        keys: mx.array,
        values: mx.array,
        cache: Any,
        scale: float,
        mask: Any,
        sinks: mx.array | None = None,
    ) -> mx.array:
        rows = queries.shape[2]
        if uses_polyexp(cache) and sinks is None:
            return polyexp.attention(queries, keys, values, scale, mask)
        if (
            isinstance(cache, VectorKVCache)
            and sinks is None
            and queries.shape[0] == 1
            and 1 < rows <= MAX_BLOCK_ROWS
            and isinstance(mask, str)
            and mask == "causal"
        ):
            return causal_block(queries, keys, values, scale)
        return original(queries, keys, values, cache=cache, scale=scale, mask=mask, sinks=sinks)

    scaled_dot_product_attention.original = original  # type: ignore[attr-defined]
    return scaled_dot_product_attention


CACHES: dict[str, type[KVCache]] = {
    "vector": VectorKVCache,
    "polyexp": PolyexpKVCache,
}


def make_cache(model: nn.Module, attention: str) -> list[Any]:
    """mlx-lm's prompt cache for `model`, each plain KVCache made the `attention`
    mode's class (exact: left as it is)."""
    cache = make_prompt_cache(model)
    kind = CACHES.get(attention)
    if kind is None:
        return cache
    return [kind() if type(entry) is KVCache else entry for entry in cache]


RESERVE_AHEAD = 1024  # new rows reserved at most: a request's memory stays near its use


def reserve(cache: list[Any], prompt_rows: int, new_rows: int) -> None:
    """Give each plain KV buffer room for the prompt and `new_rows` more rows now (at
    most RESERVE_AHEAD), so none grows mid-request.

    mlx-lm's KVCache grows by 256 rows whenever a write would pass its buffer end: a
    new, larger buffer (on CUDA possibly a fresh allocation) and a copy of every row,
    for each of the target's layers at once, inside whatever decode step or round made
    the write. Reserving a request's length (prompt + max_tokens + a block) right after
    its prefill does that once, at the prefill, in whole 256-row steps (the sizes the
    startup warm-up meets). A request that may emit more than RESERVE_AHEAD tokens
    grows by mlx-lm's steps past that, so a client's large max_tokens does not hold
    memory (and a zero fill at its prefill) that an early EOS never uses. A buffer with
    no rows yet (the drafter's, before its first block) takes the size as its step, so
    its first write allocates it all."""
    size = whole_steps(prompt_rows + min(new_rows, RESERVE_AHEAD))
    grown = []
    for entry in cache:
        if type(entry) not in (KVCache, VectorKVCache, PolyexpKVCache):
            continue
        if entry.keys is None:
            entry.step = size
        elif entry.keys.shape[2] < size:
            pad = [(0, 0), (0, 0), (0, size - entry.keys.shape[2]), (0, 0)]
            entry.keys, entry.values = mx.pad(entry.keys, pad), mx.pad(entry.values, pad)
            grown += [entry.keys, entry.values]
    mx.eval(grown)  # here, not in the first round
