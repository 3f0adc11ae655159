"""How a model's products run on this device: one layout of layer classes.

A forward's time is mostly its linear layers and the tied LM head, and what makes them
fast depends on the backend and the BLAS behind it, for the one row of a classic step
and the few rows of a verify block alike:

- `rowwise` (CUDA): multi-row products as batched one-row ones (drafter/rowwise.py);
- `padded` (CPU with MKL, AMD): one-row products as two-row ones (drafter/padded.py);
- `columns` (other CPUs): the tied head by a contiguous copy (drafter/columns.py);
- `matrix`: MLX's own layers as mlx-lm builds them.

Each layout is a table of plain class -> its class, which drafter/forward.py swaps
in: weights, parameter names and mlx-lm's model code stay as they are, and swapping
back drops whatever a layer kept (`KEPT`).
"""

from __future__ import annotations

from collections.abc import Mapping

import mlx.nn as nn

from drafter import columns, padded, rowwise
from drafter.diagnostics import LINEAR_MODES

LAYOUTS: dict[str, Mapping[type, type]] = {
    "rowwise": rowwise.SWAPS,
    "padded": padded.SWAPS,
    "columns": columns.SWAPS,
    "matrix": {},
}
assert tuple(LAYOUTS) == LINEAR_MODES
KEPT = ("_operands", "_columns", "_heads")  # what swapped layers keep beside their parameters


def layout_changes(model: nn.Module, mode: str) -> list[tuple[nn.Module, type]]:
    """Each bias-free product module of `model` and the class the `mode` layout (one of
    LINEAR_MODES) gives it, from whichever layout it is in; drafter/forward.py applies
    them. Layers with a bias keep theirs."""
    if mode not in LAYOUTS:
        raise ValueError(f"linear layout {mode!r} is none of {LINEAR_MODES}")
    plain = {swapped: cls for table in LAYOUTS.values() for cls, swapped in table.items()}
    changes = []
    for module in model.modules():
        cls = plain.get(type(module), type(module))
        target = LAYOUTS[mode].get(cls, cls)
        if target is not type(module) and "bias" not in module:
            changes.append((module, target))
    return changes


def mark_head_products(model: nn.Module) -> None:
    rowwise.mark_head_products(model)
