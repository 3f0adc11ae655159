"""Capturing the target's tapped hidden states during ordinary mlx-lm forwards."""

from __future__ import annotations

from collections.abc import Iterator

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten
from mlx_lm import load

from drafter.capture import install, installed, remove
from drafter.checkpoints.tiny import write_tiny_model

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
    remove(model)


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
    capture = install(target, [2, 1])
    logits = target(TOKENS)
    features = capture.features()
    assert features.shape == (1, TOKENS.shape[1], 2 * 64)
    norm = target.model.norm
    for index, layer in enumerate([2, 1]):
        tapped = features[..., index * 64 : (index + 1) * 64]
        assert mx.allclose(norm(tapped), truncated_hidden(target, layer + 1), atol=1e-5).item()
    remove(target)
    assert mx.array_equal(target(TOKENS), logits)


def test_capturing_keeps_weight_names_and_layer_types(target: nn.Module) -> None:
    before = [name for name, _ in tree_flatten(target.parameters())]
    kinds = [type(layer) for layer in target.layers]
    install(target, [1, 2])
    assert [name for name, _ in tree_flatten(target.parameters())] == before
    assert all(isinstance(layer, kind) for layer, kind in zip(target.layers, kinds, strict=True))
    remove(target)
    assert [type(layer) for layer in target.layers] == kinds


def test_installing_is_idempotent_and_a_repeated_layer_fills_every_slot(target: nn.Module) -> None:
    first = installed(target, [1, 1])
    assert installed(target, [1, 1]) is first
    target(TOKENS)
    features = first.features()
    assert mx.array_equal(features[..., :64], features[..., 64:])
    assert installed(target, [0, 2]) is not first
    remove(target)


def test_out_of_range_layer_is_refused(target: nn.Module) -> None:
    with pytest.raises(ValueError, match="target layer 4 out of range .* depth 4"):
        install(target, [1, 4])


def test_features_before_any_forward_are_refused(target: nn.Module) -> None:
    with pytest.raises(RuntimeError, match="no target forward"):
        install(target, [0]).features()
    remove(target)
