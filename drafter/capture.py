"""Capture the target's hidden states at the drafter's tapped layers.

DFlash reads the output of target layers `target_layer_ids` (what Hugging
Face calls `hidden_states[i + 1]`). Rather than re-implementing any target's
forward, each tapped layer's class is swapped for a subclass whose call
records its output, so an ordinary mlx-lm forward (llama, qwen3, qwen3_5,
...) fills the capture as a side effect. The parameter tree, weight names and
`isinstance` checks stay as they were.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx
import mlx.nn as nn

Call = Callable[..., Any]
_HOOKED: dict[tuple[str, type], type] = {}


def hooked_class(cls: type, prefix: str, hook: Callable[[Call], Call]) -> type:
    """The subclass of `cls` named prefix + its name whose `__call__` is
    `hook(cls.__call__)`, made once per (prefix, class). Swapping a module's
    `__class__` for it changes what the module does without copying mlx-lm's code;
    its weights and `isinstance` checks stay. drafter/decoding.py hooks norms so."""
    key = (prefix, cls)
    if key not in _HOOKED:
        _HOOKED[key] = type(f"{prefix}{cls.__name__}", (cls,), {"__call__": hook(cls.__call__)})
    return _HOOKED[key]


def original_class(cls: type, prefix: str) -> type:
    """The class `hooked_class` made `cls` from with `prefix`; `cls` itself if it made
    no such class (undoing a hook: `module.__class__ = original_class(...)`)."""
    return next((orig for (p, orig), sub in _HOOKED.items() if sub is cls and p == prefix), cls)


class Tap:
    """Where one tapped layer writes its latest output (a plain object, so
    nn.Module keeps it out of the parameter tree)."""

    def __init__(self, capture: Capture, indices: list[int]) -> None:
        self.capture = capture
        self.indices = indices


class Capture:
    """The latest outputs of the tapped layers, in `layer_ids` order."""

    def __init__(self, layer_ids: list[int]) -> None:
        self.layer_ids = list(layer_ids)
        self.outputs: list[mx.array | None] = [None] * len(layer_ids)

    def record(self, index: int, output: mx.array) -> None:
        self.outputs[index] = output

    def features(self) -> mx.array:
        """(1, L, len(layer_ids) * H): the tapped outputs of the last forward, concatenated."""
        if any(output is None for output in self.outputs):
            raise RuntimeError("no target forward has run since the capture was installed")
        return mx.concatenate(self.outputs, axis=-1)


def recording(original: Call) -> Call:
    """A layer call that also hands its output to the layer's taps."""

    def __call__(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        output = original(self, *args, **kwargs)
        tap = self._draftwise_tap
        for index in tap.indices:
            tap.capture.record(index, output[0] if isinstance(output, tuple) else output)
        return output

    return __call__


def capturing_class(cls: type) -> type:
    return hooked_class(cls, "Captured", recording)


def install(model: nn.Module, layer_ids: list[int]) -> Capture:
    """Tap `model.layers[i]` for each i in layer_ids; replaces any earlier capture."""
    layers = model.layers
    for i in layer_ids:
        if not 0 <= i < len(layers):
            raise ValueError(f"target layer {i} out of range for a target of depth {len(layers)}")
    remove(model)
    capture = Capture(layer_ids)
    for i in sorted(set(layer_ids)):
        layer = layers[i]
        layer.__class__ = capturing_class(type(layer))
        layer._draftwise_tap = Tap(capture, [n for n, j in enumerate(layer_ids) if j == i])
    model._draftwise_capture = capture
    return capture


def installed(model: nn.Module, layer_ids: list[int]) -> Capture:
    """The capture tapping exactly `layer_ids`, installing it if needed (idempotent)."""
    capture = getattr(model, "_draftwise_capture", None)
    if capture is not None and capture.layer_ids == list(layer_ids):
        return capture
    return install(model, layer_ids)


def remove(model: nn.Module) -> None:
    """Restore the tapped layers' original classes."""
    for layer in model.layers:
        original = original_class(type(layer), "Captured")
        if original is not type(layer):
            layer.__class__ = original
            del layer._draftwise_tap
    if getattr(model, "_draftwise_capture", None) is not None:
        model._draftwise_capture = None
