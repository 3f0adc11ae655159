"""Multi-row linear layers as batched one-row products (CUDA).

A verify forward runs the target's linear layers over B rows where a classic
step runs them over one. On MLX's CUDA backend those are different kernels:

- one row goes to MLX's own `gemv` kernel;
- more rows go to cuBLASLt, and `gemm_and_bias` builds a fresh matmul
  descriptor and asks cuBLASLt for a heuristic on every call
  (mlx/backend/cuda/matmul.cpp; cublas_utils.cpp, `execute_matmul`).
  That is host time per call, and a forward makes one per product (7 per layer
  and the head), so two rows cost far more than one
  (docs/benchmark_results/h200-verify-cost-sm90.md).

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
"""

from __future__ import annotations

import math
import threading

import mlx.core as mx
import mlx.nn as nn

MAX_ROWS = 16  # the widest verify block; prefill chunks keep the matrix kernels

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
    out = one_row_each(x, rows, k) @ batched
    return out if heads else out.reshape(*lead, weight.shape[0])


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
