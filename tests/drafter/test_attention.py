"""Attention modes: vector attention splits causal blocks into chunks and folds
unmasked rows into heads,
polyexp caches take drafter/polyexp.py, and all compute what exact-length keys compute."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import mlx.core as mx
import pytest
from mlx_lm import load
from mlx_lm.models.cache import KVCache

from drafter import polyexp
from drafter.attention import (
    RESERVE_AHEAD,
    PolyexpKVCache,
    VectorKVCache,
    chunked_attention,
    folded_attention,
    make_cache,
    reserve,
)
from drafter.checkpoints.tiny import write_tiny_model
from drafter.forward import route_attention
from drafter.vector_rows import VECTOR_ROWS


def feed(cache: KVCache, rows: int, offset_seed: int = 0) -> tuple[mx.array, mx.array]:
    keys = mx.random.normal((1, 2, rows, 8), key=mx.random.key(offset_seed))
    return cache.update_and_fetch(keys, keys + 1)


def test_reserve_sizes_a_buffer_once_in_whole_steps_and_keeps_its_rows() -> None:
    cache, empty = KVCache(), VectorKVCache()
    feed(cache, 10)
    before = cache.keys[..., :10, :]
    reserve([cache, empty], 10, 600)
    assert cache.keys.shape[2] == 768 and cache.offset == 10
    assert mx.array_equal(cache.keys[..., :10, :], before).item()
    feed(empty, 5)  # no rows yet: its first write allocates the whole size
    assert empty.keys.shape[2] == 768
    for seed in range(1, 120):  # writes up to the reserved length never grow the buffer
        feed(cache, 5, seed)
        feed(empty, 5, seed)
        assert cache.keys.shape[2] == empty.keys.shape[2] == 768
    assert cache.offset == 10 + 119 * 5


def test_a_large_max_tokens_reserves_at_most_reserve_ahead_rows_past_the_prompt() -> None:
    cache = KVCache()
    feed(cache, 300)
    reserve([cache], 300, 100_000)
    assert cache.keys.shape[2] == 256 * ((300 + RESERVE_AHEAD + 255) // 256)


def qkv(rows: int, keys: int, heads: int = 6, kv_heads: int = 2, seed: int = 0) -> list:
    shapes = [(1, heads, rows, 16), (1, kv_heads, keys, 16), (1, kv_heads, keys, 16)]
    return [mx.random.normal(s, key=mx.random.key(seed + i)) for i, s in enumerate(shapes)]


@pytest.mark.parametrize("rows", [2, VECTOR_ROWS, 4, 8, 16])
def test_chunked_attention_is_one_causal_call(rows: int) -> None:
    q, k, v = qkv(rows, 40 + rows, seed=rows)
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25, mask="causal")
    got = chunked_attention(q, k, v, scale=0.25)
    assert got.shape == want.shape
    assert mx.allclose(got, want, atol=1e-5, rtol=1e-5).item()


@pytest.mark.parametrize("rows", [1, 4, 16])
def test_folded_attention_is_one_unmasked_call_under_grouped_queries(rows: int) -> None:
    q, k, v = qkv(rows, 30, heads=6, kv_heads=2, seed=50 + rows)
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.25)
    assert mx.allclose(folded_attention(q, k, v, scale=0.25), want, atol=1e-5).item()


@pytest.fixture
def unrouted() -> Iterator[None]:
    """mlx-lm's model modules unrouted for a test (an engine an earlier test loaded routed
    them: route_attention is process-wide), and as they were after it."""
    saved = {
        name: module.scaled_dot_product_attention
        for name, module in list(sys.modules.items())
        if name.startswith("mlx_lm.models.") and hasattr(module, "scaled_dot_product_attention")
    }
    for name, function in saved.items():
        original = getattr(function, "original", function)
        sys.modules[name].scaled_dot_product_attention = original  # type: ignore[attr-defined]
    yield
    for name, function in saved.items():
        sys.modules[name].scaled_dot_product_attention = function  # type: ignore[attr-defined]


def test_routing_is_installed_once_and_leaves_other_caches_alone(
    tmp_path: Path, unrouted: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlx_lm.models.qwen3 as qwen3

    monkeypatch.setattr(polyexp, "MIN_SCORES", 0)  # these queries are small
    model, _ = load(str(write_tiny_model(tmp_path / "q", "qwen3", seed=1)))
    original = qwen3.scaled_dot_product_attention
    assert route_attention(model) == 1
    assert route_attention(model) == 0  # already routed
    routed = qwen3.scaled_dot_product_attention
    assert routed.original is original
    q, k, v = qkv(4, 12, seed=3)
    for cache, mask in ((KVCache(), "causal"), (VectorKVCache(), None)):
        plain = original(q, k, v, cache=cache, scale=0.25, mask=mask)
        assert mx.array_equal(routed(q, k, v, cache=cache, scale=0.25, mask=mask), plain)
    own = routed(q, k, v, cache=PolyexpKVCache(), scale=0.25, mask="causal")
    assert mx.array_equal(own, polyexp.attention(q, k, v, 0.25, "causal")).item()
    assert not mx.array_equal(own, original(q, k, v, cache=None, scale=0.25, mask="causal"))


@pytest.mark.parametrize("attention", ["vector", "polyexp"])
@pytest.mark.parametrize("kind", ["qwen3", "qwen3_5"])
def test_verify_logits_match_exact_keys(
    tmp_path: Path, kind: str, attention: str, unrouted: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(polyexp, "MIN_SCORES", 0)  # a tiny model's queries are small
    model, _ = load(str(write_tiny_model(tmp_path / kind, kind, seed=1)))
    if attention in ("vector", "polyexp"):
        route_attention(model)
    prompt, block = mx.array([list(range(3, 40))]), mx.array([[5, 9, 2, 7, 11, 4, 8]])
    exact, other = make_cache(model, "exact"), make_cache(model, attention)
    kind_of = {"vector": VectorKVCache, "polyexp": PolyexpKVCache}[attention]
    assert any(isinstance(c, kind_of) for c in other)
    model(prompt, cache=exact), model(prompt, cache=other)
    want, got = model(block, cache=exact), model(block, cache=other)
    assert mx.allclose(want, got, atol=1e-5, rtol=1e-5).item()
    assert mx.array_equal(mx.argmax(want, -1), mx.argmax(got, -1)).item()
