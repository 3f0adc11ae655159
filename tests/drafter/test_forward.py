"""The target's forward: tapped hidden states from ordinary mlx-lm forwards, returned
by the call; the one module that assigns `__class__`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten
from mlx_lm import load

from drafter.checkpoints.tiny import write_tiny_model
from drafter.forward import Forward

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}
TOKENS = mx.array([list(b"hello capture")])


@pytest.fixture(scope="module", params=["qwen3", "qwen3_5", "llama"])
def target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[nn.Module]:
    arch, overrides = (request.param, None) if request.param != "llama" else ("qwen3", LLAMA)
    path = write_tiny_model(tmp_path_factory.mktemp(request.param) / "t", arch, 0, overrides)
    model = load(str(path))[0]
    yield model
    Forward(model, [])  # untapped


def truncated_hidden(model: nn.Module, depth: int) -> mx.array:
    """The target's final-normed output when only its first `depth` layers run."""
    inner = model.model
    layers = inner.layers
    inner.layers = layers[:depth]
    try:
        return inner(TOKENS)
    finally:
        inner.layers = layers


def test_captured_features_are_the_tapped_layer_outputs_in_order(target: nn.Module) -> None:
    logits, features = Forward(target, [2, 1])(TOKENS, None, taps=True)
    assert features is not None
    assert features.shape == (1, TOKENS.shape[1], 2 * 64)
    norm = target.model.norm
    for index, layer in enumerate([2, 1]):
        tapped = features[..., index * 64 : (index + 1) * 64]
        assert mx.allclose(norm(tapped), truncated_hidden(target, layer + 1), atol=1e-5).item()
    Forward(target, [])
    assert mx.array_equal(target(TOKENS), logits)


def test_capturing_keeps_weight_names_and_layer_types(target: nn.Module) -> None:
    before = [name for name, _ in tree_flatten(target.parameters())]
    kinds = [type(layer) for layer in target.layers]
    Forward(target, [1, 2])
    assert [name for name, _ in tree_flatten(target.parameters())] == before
    assert all(isinstance(layer, kind) for layer, kind in zip(target.layers, kinds, strict=True))
    Forward(target, [])
    assert [type(layer) for layer in target.layers] == kinds


def test_a_repeated_layer_fills_every_slot_and_new_taps_replace_old(target: nn.Module) -> None:
    features = Forward(target, [1, 1])(TOKENS, None, taps=True)[1]
    assert features is not None
    assert mx.array_equal(features[..., :64], features[..., 64:])
    Forward(target, [0])
    assert sum(hasattr(layer, "_draftwise_tap") for layer in target.layers) == 1
    with pytest.raises(ValueError, match="no taps"):
        Forward(target, [])(TOKENS, None, taps=True)


def test_out_of_range_layer_is_refused(target: nn.Module) -> None:
    with pytest.raises(ValueError, match="target layer 4 out of range .* depth 4"):
        Forward(target, [1, 4])


def test_features_before_any_forward_are_refused(target: nn.Module) -> None:
    with pytest.raises(RuntimeError, match="no target forward"):
        capture = Forward(target, [0]).capture
        assert capture is not None
        capture.features()
    Forward(target, [])


def test_only_the_forward_module_assigns_classes() -> None:
    """Every `__class__` change of mlx-lm's modules goes through drafter/forward.py."""
    root = Path(__file__).resolve().parents[2]
    assigning = sorted(
        str(path.relative_to(root))
        for package in ("drafter", "server", "policy")
        for path in (root / package).rglob("*.py")
        if re.search(r"\.__class__\s*=[^=]", path.read_text())
    )
    assert assigning == ["drafter/forward.py"]
