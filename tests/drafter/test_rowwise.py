"""Rowwise products (drafter/rowwise.py): each row's product is its one-row product,
the swap is by class and reversible, and the round loop stays exact with it on."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten
from mlx_lm import load

from drafter.checkpoints.tiny import write_tiny_model
from drafter.forward import set_linear
from drafter.rowwise import (
    MAX_ROWS,
    RowwiseEmbedding,
    RowwiseLinear,
    one_row_each,
    operands,
    project,
)

K, N = 96, 40


@pytest.mark.parametrize("rows", [2, 3, 8, MAX_ROWS])
def test_each_row_of_a_rowwise_product_is_its_one_row_product(rows: int) -> None:
    x = mx.random.normal((1, rows, K), key=mx.random.key(rows))
    weight = mx.random.normal((N, K), key=mx.random.key(100 + rows))
    out = project(x, weight)
    assert out.shape == (1, rows, N)
    for i in range(rows):
        assert mx.array_equal(out[0, i], (x[0, i : i + 1] @ weight.T)[0]).item()
    assert mx.allclose(out, x @ weight.T, atol=1e-4).item()


@pytest.mark.parametrize("shape", [(1, 1, K), (1, MAX_ROWS + 1, K), (2, 3, K), (5, K)])
def test_any_leading_shape_keeps_its_shape_and_values(shape: tuple[int, ...]) -> None:
    x = mx.random.normal(shape, key=mx.random.key(7))
    weight = mx.random.normal((N, K), key=mx.random.key(8))
    out = project(x, weight)
    assert out.shape == (*shape[:-1], N)
    assert mx.allclose(out, x @ weight.T, atol=1e-4).item()


def test_a_transposed_input_is_copied_and_still_correct() -> None:
    x = mx.random.normal((K, 4), key=mx.random.key(9)).T  # (4, K), transposed strides
    weight = mx.random.normal((N, K), key=mx.random.key(10))
    assert mx.allclose(project(x, weight), x @ weight.T, atol=1e-4).item()


def test_the_rowwise_layout_swaps_bias_free_layers_and_back_without_touching_weights() -> None:
    model = nn.Sequential(nn.Embedding(50, K), nn.Linear(K, N, bias=False), nn.Linear(N, 3))
    before = [(name, mx.array(value)) for name, value in tree_flatten(model.parameters())]
    assert set_linear(model, "rowwise") == 2
    embed, plain, biased = model.layers
    assert type(embed) is RowwiseEmbedding and type(plain) is RowwiseLinear
    assert type(biased) is nn.Linear  # a bias goes to cuBLASLt even at one row
    x = mx.random.normal((1, 4, K), key=mx.random.key(11))
    assert mx.array_equal(plain(x), project(x, plain.weight)).item()
    assert set_linear(model, "rowwise") == 2 and type(plain) is RowwiseLinear  # set again
    assert set_linear(model, "matrix") == 0
    assert type(embed) is nn.Embedding and type(plain) is nn.Linear
    after = tree_flatten(model.parameters())
    assert [name for name, _ in after] == [name for name, _ in before]
    assert all(mx.array_equal(a, b).item() for (_, a), (_, b) in zip(after, before, strict=True))


def test_a_rowwise_layer_keeps_its_weight_views_until_swapped_back() -> None:
    model = nn.Sequential(nn.Linear(K, N, bias=False))
    set_linear(model, "rowwise")
    (layer,) = model.layers
    x = mx.random.normal((1, 5, K), key=mx.random.key(12))
    first = layer(x)
    kept = operands(layer)
    assert kept is operands(layer)  # made once, on the first call
    assert mx.array_equal(layer(x), first).item()
    assert mx.array_equal(first, project(x, layer.weight)).item()  # views made per call
    assert mx.array_equal(layer(x[:, :1]), x[:, :1] @ layer.weight.T).item()
    assert "_operands" not in dict(layer)  # not a parameter
    set_linear(model, "matrix")
    assert "_operands" not in layer.__dict__


def test_sibling_products_of_one_input_share_its_row_view() -> None:
    x, other = mx.ones((1, 4, K)), mx.ones((1, 4, K))
    view = one_row_each(x, 4, K)
    assert one_row_each(x, 4, K) is view  # q, k and v of one input: one node
    assert one_row_each(other, 4, K) is not view  # an equal but different input
    assert view.shape == (4, 1, K) and mx.array_equal(view.reshape(1, 4, K), x).item()


def test_head_products_come_back_unreshaped_and_the_forward_is_unchanged(
    tmp_path: Path,
) -> None:
    """mlx-lm's qwen3 attention reshapes its q/k/v products into heads straight away, so
    they skip their own reshape; every other product keeps its shape."""
    model, _ = load(str(write_tiny_model(tmp_path / "qwen3", "qwen3", seed=4)))
    tokens = mx.array([[5, 9, 2, 7, 11, 4]])
    want = model(tokens)
    set_linear(model, "rowwise")
    attention = model.model.layers[0].self_attn
    assert all(attention[name].__dict__.get("_heads") for name in ("q_proj", "k_proj", "v_proj"))
    assert not attention.o_proj.__dict__.get("_heads")
    x = mx.random.normal((1, 6, attention.q_proj.weight.shape[1]), key=mx.random.key(3))
    assert attention.q_proj(x).shape == (6, 1, attention.q_proj.weight.shape[0])
    assert attention.o_proj(mx.ones((1, 6, attention.o_proj.weight.shape[1]))).shape[:2] == (1, 6)
    assert mx.allclose(model(tokens), want, atol=1e-5).item()
    set_linear(model, "matrix")
    assert "_heads" not in attention.q_proj.__dict__
