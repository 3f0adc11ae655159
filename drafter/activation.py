"""The feed-forward activation on the CPU: SwiGLU with polyexp's exp.

mlx-lm's feed-forward layers compute `down_proj(swiglu(gate_proj(x), up_proj(x)))`,
where `swiglu` (mlx_lm/models/activations.py) is `silu(gate) * x`. On the CPU MLX's
sigmoid takes its exp one element at a time (docs/benchmark_results/cpu-polyexp-swiglu.md);
`polyexp.swiglu` (the same function with drafter/polyexp.py's vectorised exp) is the
one that vectorises.

Three modes (`ACTIVATION_MODES`): "mlx" leaves the layers as they are; "polyexp" gives
every module whose class's `__call__` calls mlx-lm's `swiglu` a subclass whose
`__call__` is the same code with that one name bound to `polyexp.swiglu`. mlx-lm's
code runs as written, nothing process-wide changes, and swapping the class back
restores it. "prefill" does that for prefill chunks only (sequences longer than any
verify block), where a prompt's hundreds of rows make the exps count, and leaves
decode rows (classic steps and verify blocks) to mlx-lm's own SwiGLU, so both decode
paths keep the bits they had. drafter/kernels.py says which serves where.

The activation is elementwise, so a row's output does not depend on the rows beside
it: a verify row and a classic step still get the same bits wherever their products
do (tests/drafter/test_activation.py), and prompt-cache hits stay exact.
"""

from __future__ import annotations

import types
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.activations import swiglu as mlx_swiglu

from drafter import polyexp
from drafter.diagnostics import ACTIVATION_MODES
from drafter.hooks import Call, hooked_class, original_class
from drafter.rowwise import MAX_ROWS

PREFIXES = {
    "polyexp": "Polyexp",
    "prefill": "PrefillPolyexp",
}  # the hooked classes' names
POLYEXP_MODES = ("polyexp", "prefill")  # the modes built on polyexp's exp: CPU only


def calls_mlx_swiglu(cls: type) -> bool:
    """Whether `cls.__call__` reads the global name `swiglu`, bound to mlx-lm's."""
    call = next((vars(c)["__call__"] for c in cls.__mro__ if "__call__" in vars(c)), None)
    code = getattr(call, "__code__", None)
    if code is None or "swiglu" not in code.co_names:
        return False
    return call.__globals__.get("swiglu") is mlx_swiglu  # type: ignore[union-attr]


def with_polyexp_swiglu(original: Call) -> Call:
    """`original` over a copy of its module's globals in which `swiglu` is polyexp's."""
    scope: dict[str, Any] = {**original.__globals__, "swiglu": polyexp.swiglu}  # type: ignore[attr-defined]
    return types.FunctionType(  # type: ignore[return-value]
        original.__code__,  # type: ignore[attr-defined]
        scope,
        original.__name__,
        original.__defaults__,  # type: ignore[attr-defined]
        original.__closure__,  # type: ignore[attr-defined]
    )


def with_polyexp_prefill(original: Call) -> Call:
    """`original`, with polyexp's SwiGLU for sequences of more than MAX_ROWS rows.

    Only a prefill chunk is that long (a verify block is at most MAX_ROWS rows), so
    decode rows (classic steps, verify blocks, alone or batched) run mlx-lm's own
    SwiGLU and keep their bits. The choice reads a sequence's length (x.shape[-2]), not
    the batch's rows: a request's verify block takes the same one alone or batched."""
    polyexp_call = with_polyexp_swiglu(original)

    def __call__(self: nn.Module, x: mx.array) -> mx.array:
        long_sequence = x.ndim > 1 and x.shape[-2] > MAX_ROWS
        return (polyexp_call if long_sequence else original)(self, x)

    return __call__


HOOKS = {
    "polyexp": with_polyexp_swiglu,
    "prefill": with_polyexp_prefill,
}


def plain_class(cls: type) -> type:
    """`cls` with any activation hook undone."""
    for prefix in PREFIXES.values():
        cls = original_class(cls, prefix)
    return cls


def activation_changes(model: nn.Module, mode: str) -> list[tuple[nn.Module, type]]:
    """Each feed-forward module of `model` and the class the `mode` activation gives
    it, from whichever it is in; drafter/forward.py applies them."""
    if mode not in ACTIVATION_MODES:
        raise ValueError(f"activation {mode!r} is none of {ACTIVATION_MODES}")
    changes = []
    for module in model.modules():
        plain = plain_class(type(module))
        if calls_mlx_swiglu(plain):
            hooked = hooked_class(plain, PREFIXES[mode], HOOKS[mode]) if mode in HOOKS else plain
            changes.append((module, hooked))
    return changes
