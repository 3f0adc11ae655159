"""The feed-forward activation on the CPU: SwiGLU with polyexp's exp.

mlx-lm's feed-forward layers compute `down_proj(swiglu(gate_proj(x), up_proj(x)))`,
where `swiglu` (mlx_lm/models/activations.py) is `silu(gate) * x`. On the CPU MLX's
sigmoid takes its exp one element at a time (docs/benchmark_results/cpu-polyexp-swiglu.md);
`polyexp.swiglu` (the same function with drafter/polyexp.py's vectorised exp) is the
one that vectorises.

Four modes (`ACTIVATION_MODES`): "mlx" leaves the layers as they are; "polyexp" gives
every module whose class's `__call__` calls mlx-lm's `swiglu` a subclass whose
`__call__` is the same code with that one name bound to `polyexp.swiglu`. mlx-lm's
code runs as written, nothing process-wide changes, and swapping the class back
restores it. "prefill" does that for prefill chunks only (sequences longer than any
verify block), where a prompt's hundreds of rows make the exps count, and leaves
decode rows (classic steps and verify blocks) to mlx-lm's own SwiGLU, so both decode
paths keep the bits they had. "compiled" (for a GPU) gives them a subclass whose
multi-row calls (a verify block) run mlx-lm's `__call__` through `mx.compile`, one
compiled function per module: a GPU round is host work, each op of a forward costs its Python call,
and a compiled feed-forward block replays its traced graph from C++ instead (the
same ops, so the same bits). One-row steps and prefill chunks run as written.
`choose_activation` says which is the default where.

The activation is elementwise, so a row's output does not depend on the rows beside
it: a verify row and a classic step still get the same bits wherever their products
do (tests/drafter/test_activation.py), and prompt-cache hits stay exact.
"""

from __future__ import annotations

import math
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
    "compiled": "Compiled",
}  # the hooked classes' names
POLYEXP_MODES = ("polyexp", "prefill")  # the modes built on polyexp's exp: CPU only
FEWEST_COMPILED_ROWS = 2  # 1 would compile classic steps too, which did not gain


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


def with_compiled_rows(original: Call) -> Call:
    """`original`, through a compiled copy of it for inputs of FEWEST_COMPILED_ROWS to
    MAX_ROWS rows.

    The compiled function is made on a module's first multi-row call and kept in its
    `__dict__` (not a parameter); `set_activation` drops it, so a class swap of the
    products (drafter/linear.py, which traced graphs would not see) re-traces."""

    def __call__(self: nn.Module, x: mx.array) -> mx.array:
        if not FEWEST_COMPILED_ROWS <= math.prod(x.shape[:-1]) <= MAX_ROWS:
            return original(self, x)
        compiled = self.__dict__.get("_compiled")
        if compiled is None:
            compiled = self.__dict__["_compiled"] = mx.compile(lambda rows: original(self, rows))
        return compiled(x)

    return __call__


HOOKS = {
    "polyexp": with_polyexp_swiglu,
    "prefill": with_polyexp_prefill,
    "compiled": with_compiled_rows,
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


def choose_activation(speculative: bool) -> str:
    """The activation where none is asked for: `prefill` on an AMD CPU under MKL (both
    decode paths: prefills gain, decode rows keep mlx-lm's bits and speed;
    cpu-amd-prefill-polyexp.md), `polyexp` for a speculative engine on an Intel CPU
    (cpu-intel-heldout24-w4-polyexp-default.md; its classic steps were slower, so classic
    keeps mlx), `compiled` for a speculative engine on CUDA (verify blocks only;
    h100-compiled-ffn.md); `mlx` elsewhere (Metal, Intel classic)."""
    from drafter.cpu_blas import INTEL, cpu_vendor, mkl_on_amd
    from drafter.device import on_cpu, on_cuda

    if speculative and on_cuda():
        return "compiled"
    if not on_cpu():
        return "mlx"
    if mkl_on_amd():
        return "prefill"
    return "polyexp" if speculative and cpu_vendor() == INTEL else "mlx"
