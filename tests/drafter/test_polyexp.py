"""polyexp: an exp within 1e-7 of the true one, masked keys weighing exactly nothing,
and attention equal to MLX's own to float32 rounding for every mask form it takes."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from drafter import polyexp


@pytest.fixture
def any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """polyexp for queries of any number of scores (these tests use small ones)."""
    monkeypatch.setattr(polyexp, "MIN_SCORES", 0)


def test_exp_is_within_a_tenth_of_a_millionth_of_float64_exp() -> None:
    x = mx.random.uniform(-87.0, 88.0, (200_000,), key=mx.random.key(0))
    want = np.exp(np.array(x).astype(np.float64))
    got = np.array(polyexp.exp(x)).astype(np.float64)
    assert np.max(np.abs(got - want) / want) < 1e-7


def test_exp_of_minus_infinity_and_tiny_values_is_exactly_zero_and_large_ones_stay_finite() -> None:
    got = polyexp.exp(mx.array([-mx.inf, -1e30, -87.5, 0.0, 88.0, 1e30]))
    assert got.tolist()[:4] == [0.0, 0.0, 0.0, 1.0]
    assert np.isfinite(np.array(got)).all()


def qkv(rows: int, keys: int, heads: int = 6, kv_heads: int = 2) -> tuple[mx.array, ...]:
    k = mx.random.key(rows * 100 + keys)
    q = mx.random.normal((2, heads, rows, 16), key=k)
    kk = mx.random.normal((2, kv_heads, keys, 16), key=mx.random.split(k)[0])
    v = mx.random.normal((2, kv_heads, keys, 16), key=mx.random.split(k)[1])
    return q, kk, v


def masks(rows: int, keys: int) -> dict[str, object]:
    keep = mx.random.uniform(shape=(2, 1, rows, keys), key=mx.random.key(7)) > 0.3
    keep = keep | (mx.arange(keys) == 0)  # every row sees a key
    per_head = mx.broadcast_to(keep, (2, 6, rows, keys))
    return {
        "none": None,
        "causal": "causal",
        "boolean": keep,
        "boolean per head": per_head,
        "additive": mx.where(keep, 0.0, -1e9),
        "two-dimensional": keep[0, 0],
    }


@pytest.mark.parametrize("rows", [2, 4, 33])
@pytest.mark.parametrize("mask_name", list(masks(1, 1)))
def test_attention_equals_mlx_attention_for_every_mask_form(
    rows: int, mask_name: str, any_size: None
) -> None:
    q, k, v = qkv(rows, 40)
    mask = masks(rows, 40)[mask_name]
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask=mask)
    got = polyexp.attention(q, k, v, 0.25, mask)
    assert got.shape == want.shape
    assert mx.allclose(got, want, atol=2e-6, rtol=1e-5).item()


def test_masked_keys_weigh_exactly_nothing(any_size: None) -> None:
    """Keys past a causal row's position, or hidden by a mask, may hold anything
    (stale rows of a rejected draft): the output must not move by a bit."""
    q, k, v = qkv(4, 20)
    keep = mx.arange(20) < 15
    before = polyexp.attention(q, k, v, 0.25, keep)
    garbage = mx.where(keep[:, None], v, 1e30)
    assert mx.array_equal(polyexp.attention(q, k, garbage, 0.25, keep), before).item()
    causal = polyexp.attention(q[..., :2, :], k, v, 0.25, "causal")  # row 0 sees keys 0-18
    hidden = mx.where((mx.arange(20) < 19)[:, None], v, -1e30)
    moved = polyexp.attention(q[..., :2, :], k, hidden, 0.25, "causal")
    assert mx.array_equal(moved[..., 0, :], causal[..., 0, :]).item()
    assert not mx.array_equal(moved[..., 1, :], causal[..., 1, :]).item()


def test_an_unknown_mask_name_is_refused(any_size: None) -> None:
    q, k, v = qkv(2, 5)
    with pytest.raises(ValueError, match="unknown attention mask 'sliding'"):
        polyexp.attention(q, k, v, 0.25, "sliding")


def test_below_its_fewest_scores_attention_is_mlx_attention(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    q, k, v = qkv(4, 40)  # 6 heads x 4 rows x 40 keys = 960 scores
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask="causal")
    monkeypatch.setattr(polyexp, "MIN_SCORES", 960)
    assert not mx.array_equal(polyexp.attention(q, k, v, 0.25, "causal"), want).item()
    monkeypatch.setattr(polyexp, "MIN_SCORES", 961)
    assert mx.array_equal(polyexp.attention(q, k, v, 0.25, "causal"), want).item()


def test_a_one_row_query_is_mlx_attention(any_size: None) -> None:
    q, k, v = qkv(1, 40)
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25)
    assert mx.array_equal(polyexp.attention(q, k, v, 0.25, None), want).item()
