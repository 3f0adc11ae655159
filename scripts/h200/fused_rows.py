"""An LM head's verify rows in one kernel pass (CUDA), for the H200 experiments.

A verify multiplies the LM head by its 8 rows as 8 batched one-row products
(drafter/rowwise.py). MLX's `gemv_batched` gives each batch item its own blocks of 8
outputs: a 49,152-token head times 8 rows is 49,152 blocks, and on an H200 that product
took 190 us against 68 us for one row (docs/benchmark_results/h200-sliced-head.md).

`fused_rows` is MLX's `gemv_impl` (mlx/backend/cuda/gemms/gemv.cu, MLX 0.32) with the
rows inside each warp: a warp reads its weight row once and keeps one sum per input row,
each made from the same values, with the same float products summed in the same order
and the same warp reduction (`cg::reduce`) as a one-row gemv, so it should equal it bit
for bit, in one block per 8 outputs as a one-row product has. It lives here, not in the
serving path: session 35's H100 found it exact (120 of 120 cases) and not cheaper
(round 6.44 against 6.30 ms with the heads fused; served 1.91x against 1.92x:
docs/benchmark_results/h100-fused-head.md). scripts/h200/fused_head.py checks it;
scripts/h200/fused_site/ serves with it."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import mlx.core as mx

import drafter.dflash as dflash
import drafter.rowwise as rowwise

# A weight past this takes `fused_rows`: by default HEADS_BYTES, the LM heads only (the
# target's, 57 MB; the drafter's restricted one); 0 takes every product of a verify too.
HEADS_BYTES = 8 << 20
FUSED_BYTES = int(os.environ.get("FUSED_BYTES", HEADS_BYTES))

# Block (32, 8): lane x, output row y; each lane sums columns lane * NPT + 32 * NPT * i.
SOURCE = """
    auto block = cg::this_thread_block();
    auto warp = cg::tiled_partition<32>(block);
    const int n = mat_shape[0];
    const int k = mat_shape[1];
    const int rows = vec_shape[0];
    const int row = block.group_index().x * 8 + block.thread_index().y;
    if (row < n) {
        float sum[MAX_ROWS];
#pragma unroll
        for (int r = 0; r < MAX_ROWS; ++r) {
            sum[r] = 0.0f;
        }
        for (int col = NPT * warp.thread_rank(); col < k; col += 32 * NPT) {
            float w[NPT];
#pragma unroll
            for (int j = 0; j < NPT; ++j) {
                w[j] = static_cast<float>(mat[row * k + col + j]);
            }
#pragma unroll
            for (int r = 0; r < MAX_ROWS; ++r) {
                if (r < rows) {
#pragma unroll
                    for (int j = 0; j < NPT; ++j) {
                        sum[r] += w[j] * static_cast<float>(vec[r * k + col + j]);
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < MAX_ROWS; ++r) {
            if (r < rows) {
                float total = cg::reduce(warp, sum[r], cg::plus<float>());
                if (warp.thread_rank() == 0) {
                    out[r * n + row] = static_cast<T>(total);
                }
            }
        }
    }
"""
_kernel: list[Any] = []  # made on first use: CUDA only


def gemv_columns_per_thread(k: int) -> int:
    """MLX's gemv `n_per_t` for reduction length k and operands aligned to 4 elements
    (every row of a contiguous weight, and of a contiguous input when k % 64 == 0)."""
    return 4 if k % 128 == 0 else 2 if k % 64 == 0 else 1


def fused_rows(x: mx.array, weight: mx.array) -> mx.array:
    """x (R, K) @ weight.T for 2 <= R <= rowwise.MAX_ROWS, in one kernel of N / 8 blocks."""
    if not _kernel:
        _kernel.append(
            mx.fast.cuda_kernel(
                name="draftwise_fused_rows",
                input_names=["mat", "vec"],
                output_names=["out"],
                source=SOURCE,
                header="#include <cooperative_groups/reduce.h>\n",
            )
        )
    n, k = weight.shape
    columns = gemv_columns_per_thread(k)
    (out,) = _kernel[0](
        inputs=[weight, x],
        template=[("T", weight.dtype), ("NPT", columns), ("MAX_ROWS", rowwise.MAX_ROWS)],
        grid=(32 * ((n + 7) // 8), 8, 1),
        threadgroup=(32, 8, 1),
        output_shapes=[(x.shape[0], n)],
        output_dtypes=[weight.dtype],
    )
    return out


SHIPPED: Callable[..., mx.array] = rowwise.project


def fused_project(x: mx.array, weight: mx.array, kept: Any = None, heads: bool = False) -> mx.array:
    """`rowwise.project`, with weights past FUSED_BYTES taken by `fused_rows`."""
    *lead, k = x.shape
    rows = math.prod(lead)
    if weight.nbytes > FUSED_BYTES and 1 < rows <= rowwise.MAX_ROWS and x.dtype == weight.dtype:
        return fused_rows(x.reshape(rows, k), weight).reshape(*lead, weight.shape[0])
    return SHIPPED(x, weight, kept, heads)


def use(project: Callable[..., mx.array]) -> None:
    rowwise.project = project
    dflash.project = project  # the restricted draft head's
