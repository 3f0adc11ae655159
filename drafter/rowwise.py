"""Multi-row linear layers as batched one-row products (CUDA).

A verify forward runs the target's linear layers over B rows where a classic
step runs them over one. On MLX's CUDA backend those are different kernels:

- one row goes to MLX's own `gemv` kernel;
- more rows go to cuBLASLt, and `gemm_and_bias` builds a fresh matmul
  descriptor and asks cuBLASLt for a heuristic on every call
  (mlx/backend/cuda/matmul.cpp; cublas_utils.cpp, `execute_matmul`).
  That is host time per call, and a forward of SmolLM2-135M makes 211 of them
  (7 per layer and the head): the bf16 forward rose from 3.7 ms at one row to
  6.5 ms at two on an H200 (../docs/benchmark_results/h200-verify-cost-sm90.md).

The fix is to present B rows as B batched one-row products. MLX's batched
gemv (`gemv_batched`) runs each batch item through the same `gemv_impl` as a
one-row call does, so every projection of a verify row equals the classic
step's bit for bit, and nothing of cuBLAS's per-call setup remains.

Two folds stand in the way, and one view avoids both. `mx.matmul` flattens a
3-D input against a 2-D weight into one (B, K) product (mlx/ops.cpp), so the
weight goes in as (1, K, N). The CUDA backend then folds broadcast batches
back into rows when the input's rows are laid out one after another. The
input, as (B, 1, K), is handed over with the stride of its length-one row axis
set to 1 (any stride is legal for an axis of length one): the backend reads it
as a transposed one-row matrix, does not fold it, and calls gemv per batch.

The swap is by class (`__class__`), as drafter/attention.py swaps caches: the
modules, their weights and mlx-lm's model code are untouched, and drafter/linear.py
swaps them back. Layers with a bias keep their class: with a bias even a one-row
product goes to cuBLASLt (its bias epilogue), so there is no kernel to match.
The engine turns it on where it pays, on CUDA; on CPU a (B, K) product is one
BLAS call, and the byte-identity suites hold without it.

LM heads, one pass for all rows (CUDA). `gemv_batched` gives each batch item its own
blocks, 8 outputs a block: a 49,152-token head times 8 rows is 49,152 blocks, and on an
H200 that product took 190 us against 68 us for one row (with the call's sync;
docs/benchmark_results/h200-sliced-head.md), at the end of the round where nothing
hides it. Reading the head in L2-sized slices did not help, so the cost is the blocks,
not the reads. `fused_rows` is `gemv_impl` itself with the rows inside each warp: a
warp reads its weight row once and keeps one sum per input row, each made by the same
loads, the same float products summed in the same order, and the same warp reduction
(`cg::reduce`) as a one-row gemv: equal bit for bit, with one block per 8 outputs as a
one-row product has. It serves weights past FUSED_BYTES (the target's head, the
drafter's restricted head); the other products stay batched, where a custom kernel's
per-call host cost would outweigh its blocks.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import mlx.core as mx
import mlx.nn as nn

MAX_ROWS = 16  # the widest verify block; prefill chunks keep the matrix kernels
FUSED_BYTES = 8 << 20  # a weight past this (an LM head) takes `fused_rows` on CUDA

# gemv_impl (mlx/backend/cuda/gemms/gemv.cu, MLX 0.32) with MAX_ROWS input rows per warp.
# Block (32, 8): lane x, output row y; each lane sums columns lane * NPT + 32 * NPT * i.
FUSED_SOURCE = """
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
_fused_kernel: list[Any] = []  # made on first use (CUDA only)

# mlx-lm attention modules whose q/k/v products go straight into
# `.reshape(B, L, heads, -1)` (read in mlx-lm 0.32's llama.py, qwen2.py, qwen3.py).
HEADS_READERS = ("mlx_lm.models.llama", "mlx_lm.models.qwen2", "mlx_lm.models.qwen3")
HEAD_PRODUCTS = ("q_proj", "k_proj", "v_proj")


def transposed(weight: mx.array) -> tuple[mx.array, mx.array]:
    """The product's operands, `weight.T` (K, N) and `weight.T[None]` (1, K, N): views of
    the weight, no copies."""
    plain = weight.T
    return plain, plain[None]


def operands(module: nn.Module) -> tuple[mx.array, mx.array]:
    """`transposed(module.weight)`, made on the module's first call and kept there.

    Made per call, the two views are two more graph nodes for every product: a verify
    forward of SmolLM2-135M makes 211 products, and each node costs host time on a
    launch-bound GPU (the Python op, then its evaluation). Kept, they are arrays already
    evaluated after the first forward. Not parameters (never saved or loaded);
    drafter/linear.py drops them with the class."""
    kept = module.__dict__.get("_operands")
    if kept is None:
        kept = module.__dict__["_operands"] = transposed(module["weight"])
    return kept


_last = threading.local()  # the last input `one_row_each` viewed, and its view


def one_row_each(x: mx.array, rows: int, k: int) -> mx.array:
    """x (..., K) as (rows, 1, K) with the length-one axis given stride 1: read as a
    transposed row. Sibling products of one input (q, k and v; gate and up) share one
    view: one graph node, not three (each costs host time on a launch-bound GPU). The
    input is kept until the next product, so its identity cannot be reused meanwhile."""
    last = getattr(_last, "pair", None)
    if last is not None and last[0] is x:
        return last[1]
    view = mx.as_strided(x, (rows, 1, k), (k, 1, 1))
    _last.pair = (x, view)
    return view


def project(
    x: mx.array,
    weight: mx.array,
    kept: tuple[mx.array, mx.array] | None = None,
    heads: bool = False,
) -> mx.array:
    """x @ weight.T, as one gemv per row when x has 2 to MAX_ROWS rows.

    x: (..., K); weight: (N, K); kept: its `transposed` views, if the caller keeps them.
    Each output row is the one-row product of its row. heads: the caller reshapes the
    product into (..., heads, head_dim) next, so a multi-row product comes back as the
    batched product's (rows, 1, N), which that reshape reads as it reads (..., N): one
    graph node fewer."""
    plain, batched = transposed(weight) if kept is None else kept
    *lead, k = x.shape
    rows = math.prod(lead)
    if not 1 < rows <= MAX_ROWS:
        return x @ plain
    if weight.nbytes > FUSED_BYTES and fused_available():
        return fused_rows(x.reshape(rows, k), weight).reshape(*lead, weight.shape[0])
    out = one_row_each(x, rows, k) @ batched
    return out if heads else out.reshape(*lead, weight.shape[0])


def fused_available() -> bool:
    """Whether `fused_rows` can run: MLX computes on CUDA (custom kernels are CUDA's)."""
    return mx.default_device().type == mx.gpu and mx.cuda.is_available()


def gemv_columns_per_thread(k: int) -> int:
    """The columns a lane loads at once in MLX's gemv for reduction length k (its
    `n_per_t`, for operands aligned to 4 elements, as every row of a contiguous weight
    and of a contiguous input of k % 64 == 0 columns is): it sets the order of the sums."""
    return 4 if k % 128 == 0 else 2 if k % 64 == 0 else 1


def fused_rows(x: mx.array, weight: mx.array) -> mx.array:
    """x (R, K) @ weight.T for 2 <= R <= MAX_ROWS, each row as MLX's one-row gemv sums it
    (see the module's docstring), in one kernel of N / 8 blocks. CUDA only."""
    if not _fused_kernel:
        _fused_kernel.append(
            mx.fast.cuda_kernel(
                name="draftwise_fused_rows",
                input_names=["mat", "vec"],
                output_names=["out"],
                source=FUSED_SOURCE,
                header="#include <cooperative_groups/reduce.h>\n",
            )
        )
    n, k = weight.shape
    (out,) = _fused_kernel[0](
        inputs=[weight, x],
        template=[("T", weight.dtype), ("NPT", gemv_columns_per_thread(k)), ("MAX_ROWS", MAX_ROWS)],
        grid=(32 * ((n + 7) // 8), 8, 1),
        threadgroup=(32, 8, 1),
        output_shapes=[(x.shape[0], n)],
        output_dtypes=[weight.dtype],
    )
    return out


class RowwiseLinear(nn.Linear):
    """nn.Linear (bias-free) whose multi-row calls are batched one-row products."""

    def __call__(self, x: mx.array) -> mx.array:
        heads = self.__dict__.get("_heads", False)
        return project(x, self["weight"], operands(self), heads)


def mark_head_products(model: nn.Module) -> None:
    """Let the q/k/v products of `model`'s HEADS_READERS attention modules hand back
    their (rows, 1, N) product unreshaped (`project`'s heads). A flag beside the
    weights, not a parameter; drafter/linear.py drops it with the class."""
    for module in model.modules():
        if type(module).__module__ not in HEADS_READERS:
            continue
        for name in HEAD_PRODUCTS:
            product = module.get(name)  # a module's children are its dict entries
            if type(product) is RowwiseLinear:
                product.__dict__["_heads"] = True


class RowwiseEmbedding(nn.Embedding):
    """nn.Embedding whose tied LM head (`as_linear`) runs rowwise."""

    def as_linear(self, x: mx.array) -> mx.array:
        return project(x, self["weight"], operands(self))


SWAPS: dict[type, type] = {nn.Linear: RowwiseLinear, nn.Embedding: RowwiseEmbedding}
