"""H200 experiment: an LM head's verify rows in one pass, exact, and cheaper?

A verify multiplies the LM head by its 8 rows as 8 batched one-row products
(drafter/rowwise.py). MLX's `gemv_batched` gives each batch item its own blocks of 8
outputs: a 49,152-token head times 8 rows is 49,152 blocks, and on an H200 that product
took 190 us against 68 us for one row (docs/benchmark_results/h200-sliced-head.md), at
the end of the round where nothing hides it; reading the head in L2-sized slices did
not help, so the cost is the blocks, not the reads.

`fused_rows` below is MLX's `gemv_impl` (mlx/backend/cuda/gemms/gemv.cu, MLX 0.32) with
the rows inside each warp: a warp reads its weight row once and keeps one sum per input
row, each made from the same values, with the same float products summed in the same
order and the same warp reduction (`cg::reduce`) as a one-row gemv, so it should equal
it bit for bit, in one block per 8 outputs as a one-row product has. It lives here, not
in the serving path, until a GPU run shows both.

1. Exactness: head-like shapes, 2 to 16 rows, three dtypes: `fused_rows` against the
   batched one-row products and against each row's own one-row product, bit for bit.
2. The head products alone (8 target rows, 7 draft rows), synced each call, arms in
   alternating blocks of 20, n = 200 each (us).
3. `ab.alternate`: `draftwise profile`'s width-8 measurement, arm "after" with weights
   past FUSED_BYTES (the target's head, the drafter's restricted head) multiplied by
   `fused_rows`, "before" as shipped, AB/BA for n passes. argv: n (default 10), tokens
   (default 128)."""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import mlx.core as mx
from ab import alternate, width8_engine

import drafter.dflash as dflash
import drafter.rowwise as rowwise
from drafter.dflash import DFlashDrafter

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10
TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 128
FUSED_BYTES = 8 << 20  # a weight past this (an LM head) takes `fused_rows`
SHAPES = [(49152, 576), (16384, 576), (8192, 1536), (4096, 640), (4104, 600)]

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
    if weight.nbytes > FUSED_BYTES and 1 < rows <= rowwise.MAX_ROWS:
        return fused_rows(x.reshape(rows, k), weight).reshape(*lead, weight.shape[0])
    return SHIPPED(x, weight, kept, heads)


def use(project: Callable[..., mx.array]) -> None:
    rowwise.project = project
    dflash.project = project  # the restricted draft head's


def exactness() -> bool:
    ok = True
    for dtype in (mx.bfloat16, mx.float16, mx.float32):
        for n, k in SHAPES:
            weight = mx.random.normal((n, k), key=mx.random.key(n + k)).astype(dtype)
            for rows in (2, 3, 7, 8, 16):
                x = mx.random.normal((rows, k), key=mx.random.key(rows)).astype(dtype)
                fused, want = fused_rows(x, weight), SHIPPED(x, weight)
                single = mx.concatenate([x[i : i + 1] @ weight.T for i in range(rows)])
                same = mx.array_equal(fused, want).item()
                same_single = mx.array_equal(fused, single).item()
                ok = ok and same and same_single
                line = {"dtype": str(dtype), "n": n, "k": k, "rows": rows}
                line |= {"equal_batched": same, "equal_one_row": same_single}
                if not same:
                    line["differing"] = int((fused != want).sum().item())
                print(json.dumps(line), flush=True)
    return ok


def product_us(weight: mx.array, rows: int, reps: int = 200) -> None:
    x = mx.random.normal((rows, weight.shape[1])).astype(weight.dtype)
    arms = {"batched": lambda: SHIPPED(x, weight), "fused": lambda: fused_rows(x, weight)}
    times: dict[str, list[float]] = {a: [] for a in arms}
    for block in range(reps // 20 + 1):
        for name in list(arms) if block % 2 == 0 else list(arms)[::-1]:
            for _ in range(20):
                began = time.perf_counter()
                mx.eval(arms[name]())
                if block:
                    times[name].append(1e6 * (time.perf_counter() - began))
    line = {a: (statistics.median(v), min(v), max(v)) for a, v in times.items()}
    print(json.dumps({"head": list(weight.shape), "rows": rows, "us_median_min_max": line}))


if __name__ == "__main__":
    print(json.dumps({"exact": exactness()}), flush=True)
    engine = width8_engine()
    assert isinstance(engine.drafter, DFlashDrafter)
    product_us(engine.model.model.embed_tokens.weight, rows=8)
    product_us(engine.drafter.head.weight, rows=7)  # the restricted draft head
    arms = {"before": lambda: use(SHIPPED), "after": lambda: use(fused_project)}
    alternate(engine, arms, N, TOKENS)
