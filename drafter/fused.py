"""Sibling linear layers that read the same input, as one product (CUDA).

mlx-lm's attention projects its input three times (`q_proj`, `k_proj`, `v_proj`) and
its MLP twice (`gate_proj`, `up_proj`): five kernels a layer where one matrix of
stacked weights would do in two. A small target is launch-bound on an H200, about
12-16 us of host time a kernel (docs/benchmark_results/h200-fewer-kernels.md), and a
forward of SmolLM2-135M makes 150 such products: a classic step and a verify forward
alike.

Fused, the siblings' weights become row slices of one (N_1 + N_2 + ..., K) matrix, and
the first sibling called with an input computes the whole product; the others take
their columns of it. Each output column is still the dot product of the same weight row
with the same input row in MLX's gemv kernel, whose sum for one output depends on K and
the pointers' alignment only, not on how many outputs share the call
(mlx/backend/cuda/gemms/gemv.cu, `gemv_impl`): the values are unchanged bit for bit, at
one row and at 2 to rowwise.MAX_ROWS rows (batched one-row products, drafter/rowwise.py).
Wider inputs (prefill chunks) keep each sibling's own product, as before: cuBLAS picks
its tiling by shape.

The slices are views (a row slice of a row-major matrix is contiguous), so memory does
not grow. The swap is by class, as rowwise.py swaps; `set_fused(model, False)` undoes it
(the weights stay views of the stacked matrix, with the same values). Which siblings
share an input is a fact of the model code, so the caller names them: mlx-lm's
attention reads one input for q, k and v, the drafter's reads its block for q and the
context rows with the block for k and v (drafter/dflash.py). A sibling called with an
input that is not its group's last one computes the product itself: a wrong grouping
costs time, never a value.
"""

from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn

from drafter.rowwise import MAX_ROWS, RowwiseLinear, project, transposed

TARGET_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
DRAFTER_GROUPS = (("k_proj", "v_proj"), ("gate_proj", "up_proj"))
FUSABLE = (nn.Linear, RowwiseLinear)  # bias-free, unquantized: see `members`


class Siblings:
    """One group's stacked weight and its last product.

    The last input is held (so its id cannot be reused by another array) until the next
    input arrives; arrays are immutable, so the same object means the same value."""

    def __init__(self, weights: list[mx.array], rowwise: bool) -> None:
        self.rowwise = rowwise  # 2 to MAX_ROWS rows as batched one-row products
        self.weight = mx.concatenate(weights, axis=0)
        mx.eval(self.weight)
        ends = [0]
        for w in weights:
            ends.append(ends[-1] + w.shape[0])
        self.bounds = list(zip(ends[:-1], ends[1:], strict=True))
        self.operands = transposed(self.weight)
        self.last_input: mx.array | None = None
        self.last_output: mx.array | None = None

    def output(self, x: mx.array, index: int) -> mx.array:
        """Sibling `index`'s product with x: its columns of the stacked product."""
        if x is not self.last_input:
            self.last_input = x
            if self.rowwise:
                self.last_output = project(x, self.weight, self.operands)
            else:
                self.last_output = x @ self.operands[0]
        assert self.last_output is not None
        start, end = self.bounds[index]
        return self.last_output[..., start:end]

    def forget(self) -> None:
        self.last_input = self.last_output = None


class FusedLinear(RowwiseLinear):
    """A sibling: products of 1 to MAX_ROWS rows come from its group's stacked product
    (rowwise, if the siblings were RowwiseLinear when fused)."""

    def __call__(self, x: mx.array) -> mx.array:
        if math.prod(x.shape[:-1]) > MAX_ROWS:
            return x @ self["weight"].T
        group: Siblings = self.__dict__["_siblings"]
        return group.output(x, self.__dict__["_sibling_index"])


def members(parent: nn.Module, names: tuple[str, ...]) -> list[nn.Module] | None:
    """The group's modules in `parent`, if every one is a bias-free unquantized linear
    layer over the same input width; else None."""
    modules = [parent.get(name) for name in names]
    if not all(type(m) in (*FUSABLE, FusedLinear) for m in modules):
        return None
    if any("bias" in m for m in modules):
        return None
    if len({m["weight"].shape[1] for m in modules}) != 1:
        return None
    return modules


def set_fused(model: nn.Module, on: bool, groups: tuple[tuple[str, ...], ...]) -> int:
    """Fuse (on) or unfuse (off) each named sibling group of `model`'s modules; returns
    how many groups changed. Off, each sibling gets the class it had before."""
    changed = 0
    for parent in model.modules():
        for names in groups:
            found = members(parent, names)
            if found is None or all(type(m) is FusedLinear for m in found) == on:
                continue
            if on:
                fuse(found)
            else:
                for m in found:
                    m.__class__ = m.__dict__.pop("_unfused_class")
                    m.__dict__.pop("_siblings", None)
                    m.__dict__.pop("_operands", None)
            changed += 1
    return changed


def fuse(modules: list[nn.Module]) -> None:
    rowwise = all(type(m) is RowwiseLinear for m in modules)
    group = Siblings([m["weight"] for m in modules], rowwise)
    for index, (module, (start, end)) in enumerate(zip(modules, group.bounds, strict=True)):
        module["weight"] = group.weight[start:end]
        module.__dict__["_unfused_class"] = type(module)
        module.__dict__["_siblings"] = group
        module.__dict__["_sibling_index"] = index
        module.__dict__.pop("_operands", None)  # rowwise's views of the old weight
        module.__class__ = FusedLinear
    mx.eval([m["weight"] for m in modules])
