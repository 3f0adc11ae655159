"""How the target runs: tokens and a cache in, logits and the tapped features out.

`Forward` is the one place that changes what mlx-lm's modules compute, and it does so
when built or when its kernels change, never per call from elsewhere:

- taps: each layer the drafter reads (`target_layer_ids`) gets a subclass whose call
  also hands its output to the forward's `Capture`, so an ordinary mlx-lm forward
  (llama, qwen3, qwen3_5, ...) yields the features a call returns;
- recurrent layers (`linear_attn`, Gated DeltaNet) get a subclass that records its
  inputs into its cache while armed (drafter/rollback.py), so rollback can re-run mlx-lm's own
  module on the accepted rows (drafter/rollback.py);
- kernels (`Kernels`): attention routed by cache class (drafter/attention.py), the
  linear layout (drafter/linear.py) and the SwiGLU (drafter/activation.py), applied
  together in one fixed order;
- a prefill's last chunk computes the LM head for its last row only (`last_row`).

Each change is a subclass swapped in as the module's `__class__` (`restyle`): weights,
parameter names and `isinstance` checks stay as mlx-lm made them, and mlx-lm's code
runs as written.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import ArraysCache

from drafter import activation, linear
from drafter.attention import CUDNN_ENV, dispatch
from drafter.diagnostics import ACTIVATION_MODES, ATTENTION_MODES, LINEAR_MODES
from drafter.hooks import Call, hooked_class, original_class

Change = tuple[nn.Module, type]  # a module and the class it is to have


def restyle(changes: Iterable[Change], drop: tuple[str, ...] = ()) -> int:
    """Give each module its new class, dropping the `drop` keys it kept beside its
    parameters under the old one; returns how many changed."""
    changed = 0
    for module, cls in changes:
        if type(module) is cls:
            continue
        module.__class__ = cls
        for key in drop:
            module.__dict__.pop(key, None)
        changed += 1
    return changed


@dataclass(frozen=True)
class Kernels:
    """How the target's forwards compute (each mode: see its module). A bundle with an
    unknown mode cannot be made, so none is ever half-applied."""

    attention: str = "exact"
    linear: str = "matrix"
    activation: str = "mlx"

    def __post_init__(self) -> None:
        for name, value, modes in (
            ("attention", self.attention, ATTENTION_MODES),
            ("linear layout", self.linear, LINEAR_MODES),
            ("activation", self.activation, ACTIVATION_MODES),
        ):
            if value not in modes:
                raise ValueError(f"{name} {value!r} is none of {modes}")


class Capture:
    """The latest outputs of the tapped layers, in `layer_ids` order."""

    def __init__(self, layer_ids: list[int]) -> None:
        self.layer_ids = list(layer_ids)
        self.outputs: list[mx.array | None] = [None] * len(layer_ids)

    def features(self) -> mx.array:
        """(B, L, len(layer_ids) * H): the tapped outputs of the last forward."""
        if any(output is None for output in self.outputs):
            raise RuntimeError("no target forward has run since the taps were installed")
        return mx.concatenate(self.outputs, axis=-1)


class Tap:
    """Where one tapped layer writes its output (a plain object, so nn.Module keeps it
    out of the parameter tree)."""

    def __init__(self, capture: Capture, indices: list[int]) -> None:
        self.capture = capture
        self.indices = indices


def tapping(original: Call) -> Call:
    def __call__(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        output = original(self, *args, **kwargs)
        tap = self._draftwise_tap
        for index in tap.indices:
            tap.capture.outputs[index] = output[0] if isinstance(output, tuple) else output
        return output

    return __call__


def recording(original: Call) -> Call:
    """A recurrent layer's call that records its inputs when its cache is armed."""

    def __call__(self: nn.Module, inputs: mx.array, mask: Any = None, cache: Any = None) -> Any:
        record = getattr(cache, "armed", None) if isinstance(cache, ArraysCache) else None
        if record is not None:
            record.module, record.inputs, record.mask = self, inputs, mask
        return original(self, inputs, mask, cache)

    return __call__


def last_row_only(original: Call) -> Call:
    """A norm call that normalises only its input's last row."""

    def __call__(self: nn.Module, x: mx.array, *args: Any, **kwargs: Any) -> Any:
        return original(self, x[..., -1:, :], *args, **kwargs)

    return __call__


class Forward:
    """The target as the decoder runs it; `__call__` is every forward a request makes."""

    def __init__(
        self, model: nn.Module, taps: list[int] | None = None, kernels: Kernels | None = None
    ) -> None:
        """taps: the layers whose outputs a call may return (None: leave the model's
        taps as they are; [] removes them); kernels: None leaves the modules' kernels
        as they are (tests that set one module kind themselves)."""
        self.model = model
        self.taps = taps
        self.capture = None if taps is None else install_taps(model, taps)
        restyle(
            (
                module,
                hooked_class(original_class(type(module), "Recording"), "Recording", recording),
            )
            for layer in getattr(model, "layers", [])
            if (module := getattr(layer, "linear_attn", None)) is not None
        )
        self.kernels = Kernels()
        if kernels is not None:
            self.use(kernels)

    def __call__(
        self,
        tokens: mx.array,
        cache: list[Any] | None,
        *,
        taps: bool = False,
        last_row: bool = False,
    ) -> tuple[mx.array, mx.array | None]:
        """(B, L) tokens through the target: (B, L, V) logits ((B, 1, V) with
        `last_row`) and, with `taps`, the (B, L, F) tapped features."""
        with self.last_row_head() if last_row else nullcontext():
            logits = self.run(tokens, cache, taps)
        features = None
        if taps:
            if self.capture is None:
                raise ValueError("this target has no taps: it was loaded without a drafter")
            features = self.capture.features()
        return logits, features

    def run(self, tokens: mx.array, cache: list[Any] | None, taps: bool) -> mx.array:
        if taps and self.capture is not None and not self.tapped():
            # another Forward over the same model (a second engine) moved the taps
            assert self.taps is not None
            self.capture = install_taps(self.model, self.taps)
        return self.model(tokens, cache=cache)

    def tapped(self) -> bool:
        assert self.capture is not None and self.taps
        tap = getattr(self.model.layers[self.taps[0]], "_draftwise_tap", None)
        return tap is not None and tap.capture is self.capture

    def use(self, kernels: Kernels) -> None:
        """Run with `kernels` from now on: attention, the linear layout, the activation."""
        if kernels.attention == "vector":  # its one-row calls must not go to cuDNN; MLX
            os.environ.setdefault(CUDNN_ENV, "0")  # reads this at its first attention call
        if kernels.attention in ("vector", "polyexp"):
            route_attention(self.model)
        set_linear(self.model, kernels.linear)
        set_activation(self.model, kernels.activation)
        self.kernels = kernels

    @contextmanager
    def last_row_head(self) -> Iterator[None]:
        """Within the block, forwards compute the LM head for the last row only.

        A prefill needs its last row's logits alone, but an mlx-lm forward computes
        them for every row ((L, V), 1.2 GB in float32 for a 2,048-row chunk of a
        150k vocabulary). mlx-lm's models apply their final norm (`model.model.norm`)
        just before the head, and both act row by row, so the norm passes on only its
        last row. A model without that norm keeps the full head; taps are untouched."""
        norm = getattr(getattr(self.model, "model", None), "norm", None)
        if not isinstance(norm, nn.Module):
            yield
            return
        plain = type(norm)
        restyle([(norm, hooked_class(plain, "LastRow", last_row_only))])
        try:
            yield
        finally:
            restyle([(norm, plain)])


def install_taps(model: nn.Module, layer_ids: list[int]) -> Capture | None:
    """Tap `model.layers[i]` for each i in layer_ids, replacing earlier taps; None
    when there are none."""
    layers = getattr(model, "layers", [])
    for i in layer_ids:
        if not 0 <= i < len(layers):
            raise ValueError(f"target layer {i} out of range for a target of depth {len(layers)}")
    for layer in layers:
        if restyle([(layer, original_class(type(layer), "Tapped"))]):
            del layer._draftwise_tap
    if not layer_ids:
        return None
    capture = Capture(layer_ids)
    for i in sorted(set(layer_ids)):
        layer = layers[i]
        restyle([(layer, hooked_class(type(layer), "Tapped", tapping))])
        layer._draftwise_tap = Tap(capture, [n for n, j in enumerate(layer_ids) if j == i])
    return capture


def route_attention(model: nn.Module) -> int:
    """Route the attention of `model`'s mlx-lm architecture modules through
    attention.dispatch, which picks by cache class (once per module); returns how many
    modules were routed. This is the one mlx-lm function draftwise replaces."""
    routed = 0
    for module in model.modules():
        source = sys.modules.get(type(module).__module__)
        original = getattr(source, "scaled_dot_product_attention", None)
        if original is None or hasattr(original, "original"):
            continue
        source.scaled_dot_product_attention = dispatch(original)  # type: ignore[union-attr]
        routed += 1
    return routed


def set_linear(model: nn.Module, mode: str) -> int:
    """Put `model`'s layers (a target's or a drafter's) in the `mode` linear layout;
    returns how many modules it moved into that layout's classes."""
    changes = linear.layout_changes(model, mode)
    restyle(changes, drop=linear.KEPT)
    if mode == "rowwise":
        linear.mark_head_products(model)
    layout = set(linear.LAYOUTS[mode].values())
    return sum(type(module) in layout for module in model.modules())


def set_activation(model: nn.Module, mode: str) -> int:
    """Give `model`'s feed-forward layers the `mode` SwiGLU; returns how many changed."""
    return restyle(activation.activation_changes(model, mode))
