"""Padded one-row products (drafter/padded.py): a single row's product comes out alone
and equal to the plain one; more rows are plain products."""

from __future__ import annotations

import io

import mlx.core as mx
import mlx.nn as nn
import pytest

from drafter.forward import set_linear
from drafter.padded import PaddedEmbedding, PaddedLinear, padded_product

K, N = 96, 40


@pytest.mark.parametrize("shape", [(1, 1, K), (1, K), (K,), (1, 1, 1, K)])
def test_a_single_row_comes_out_alone_in_its_own_shape(shape: tuple[int, ...]) -> None:
    x = mx.random.normal(shape, key=mx.random.key(1))
    weight = mx.random.normal((N, K), key=mx.random.key(2))
    out = padded_product(x, weight)
    assert out.shape == (*shape[:-1], N)
    assert mx.allclose(out, x @ weight.T, atol=1e-4).item()


@pytest.mark.parametrize("shape", [(1, 2, K), (3, 1, K), (1, 9, K)])
def test_more_rows_are_one_plain_product(shape: tuple[int, ...]) -> None:
    x = mx.random.normal(shape, key=mx.random.key(3))
    weight = mx.random.normal((N, K), key=mx.random.key(4))
    assert mx.array_equal(padded_product(x, weight), x @ weight.T).item()


def builds_a_padded_row(out: mx.array) -> bool:
    """Whether `out`'s graph joins a row of zeros to its input (a Concatenate node)."""
    graph = io.StringIO()
    mx.export_to_dot(graph, out)
    return "Concatenate" in graph.getvalue()


@pytest.mark.parametrize(("dtype", "padded"), [(mx.float32, True), (mx.bfloat16, False)])
def test_only_float32_products_are_padded(dtype: mx.Dtype, padded: bool) -> None:
    # bfloat16 runs MLX's own CPU kernel: a second row would only double its work
    x = mx.random.normal((1, 1, K), key=mx.random.key(6)).astype(dtype)
    weight = mx.random.normal((N, K), key=mx.random.key(7)).astype(dtype)
    assert builds_a_padded_row(padded_product(x, weight)) is padded


def test_the_padded_layout_swaps_the_head_and_bias_free_layers_only() -> None:
    model = nn.Sequential(nn.Embedding(50, K), nn.Linear(K, N, bias=False), nn.Linear(N, 3))
    embed, plain, biased = model.layers
    x = mx.random.normal((1, 1, K), key=mx.random.key(5))
    want_head, want_plain = embed.as_linear(x), plain(x)
    assert set_linear(model, "padded") == 2
    assert type(embed) is PaddedEmbedding and type(plain) is PaddedLinear
    assert type(biased) is nn.Linear
    assert mx.allclose(embed.as_linear(x), want_head, atol=1e-4).item()
    assert mx.allclose(plain(x), want_plain, atol=1e-4).item()
    assert set_linear(model, "matrix") == 0 and type(plain) is nn.Linear
