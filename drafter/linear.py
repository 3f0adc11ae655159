"""How a model's products run on this device: one layout, set by swapping layer classes.

A forward's time is mostly its linear layers and the tied LM head, and what makes them
fast depends on the backend and the BLAS behind it, for the one row of a classic step
and the few rows of a verify block alike:

- `rowwise` (CUDA): multi-row products as batched one-row ones (drafter/rowwise.py);
- `padded` (CPU with MKL, AMD): one-row products as two-row ones (drafter/padded.py);
- `columns` (other CPUs): the tied head by a contiguous copy (drafter/columns.py);
- `matrix`: MLX's own layers as mlx-lm builds them.

Each layout is a table of plain class -> its class. The swap touches `__class__` only:
weights, parameter names and mlx-lm's model code stay as they are, and swapping back
drops whatever a layer kept (`KEPT`).
"""

from __future__ import annotations

from collections.abc import Mapping

import mlx.nn as nn

from drafter import columns, padded, rowwise
from drafter.cpu_blas import mkl_on_amd
from drafter.device import on_cpu, on_cuda
from drafter.diagnostics import LINEAR_MODES

LAYOUTS: dict[str, Mapping[type, type]] = {
    "rowwise": rowwise.SWAPS,
    "padded": padded.SWAPS,
    "columns": columns.SWAPS,
    "matrix": {},
}
assert tuple(LAYOUTS) == LINEAR_MODES
KEPT = ("_operands", "_columns", "_heads")  # what swapped layers keep beside their parameters


def swap_classes(model: nn.Module, table: Mapping[type, type]) -> int:
    """Give each bias-free module whose class is a key of `table` the class it maps to;
    returns how many changed. Layers with a bias keep theirs."""
    changed = 0
    for module in model.modules():
        target = table.get(type(module))
        if target is None or "bias" in module:
            continue
        module.__class__ = target
        for key in KEPT:
            module.__dict__.pop(key, None)
        changed += 1
    return changed


def set_linear(model: nn.Module, mode: str) -> int:
    """Put `model`'s layers in the `mode` layout (one of LINEAR_MODES), from whichever
    they were in; returns how many modules the layout swapped."""
    if mode not in LAYOUTS:
        raise ValueError(f"linear layout {mode!r} is none of {LINEAR_MODES}")
    for table in LAYOUTS.values():
        swap_classes(model, {swapped: plain for plain, swapped in table.items()})
    changed = swap_classes(model, LAYOUTS[mode])
    if mode == "rowwise":
        rowwise.mark_head_products(model)
    return changed


def choose_linear() -> str:
    """The layout where none is asked for: rowwise on CUDA; on CPU padded under MKL on
    an AMD CPU, where it was measured to pay (cpu-amd-padded-step.md), else columns
    (an Intel CPU under MKL is not measured padded: it keeps what it was measured
    with); matrix elsewhere (Metal)."""
    if on_cuda():
        return "rowwise"
    if on_cpu():
        return "padded" if mkl_on_amd() else "columns"
    return "matrix"
