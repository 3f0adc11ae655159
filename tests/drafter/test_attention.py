"""Shape-stable attention: multi-row reads see the whole cache buffer, masked, and
compute what exact-length keys compute."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm import load
from mlx_lm.models.cache import KVCache

from drafter.attention import StableKVCache, make_cache, tail_mask
from drafter.checkpoints.tiny import write_tiny_model


def feed(cache: KVCache, rows: int, offset_seed: int = 0) -> tuple[mx.array, mx.array]:
    keys = mx.random.normal((1, 2, rows, 8), key=mx.random.key(offset_seed))
    return cache.update_and_fetch(keys, keys + 1)


def test_multi_row_reads_present_the_whole_buffer_and_one_row_reads_the_exact_slice() -> None:
    cache = StableKVCache()
    keys, _ = feed(cache, 10)  # first fill: exact length
    assert keys.shape[2] == 10
    for seed in range(1, 30):  # verify-like updates: the read shape never changes
        keys, _ = feed(cache, 4, seed)
        assert keys.shape[2] == 256
        cache.trim(2)
    one, _ = feed(cache, 1, 99)
    assert one.shape[2] == cache.offset


def test_buffer_grows_by_whole_steps_so_lengths_stay_multiples_of_256() -> None:
    cache = StableKVCache()
    feed(cache, 250)
    for seed, rows in enumerate((4, 8, 16, 3, 64, 200, 5)):
        expected = cache.allocation_after(rows)
        before = cache.keys[..., : cache.offset, :]
        feed(cache, rows, seed)
        assert cache.keys.shape[2] == expected and expected % 256 == 0
        assert mx.array_equal(cache.keys[..., : before.shape[2], :], before).item()
    assert cache.offset == 250 + 4 + 8 + 16 + 3 + 64 + 200 + 5


def test_tail_mask_is_bottom_right_causal_over_the_real_keys() -> None:
    mask = tail_mask(offset=3, rows=2, length=8, dtype=mx.float32, causal=True)
    visible = (mask == 0).tolist()
    assert visible == [[True] * 4 + [False] * 4, [True] * 5 + [False] * 3]
    block = tail_mask(offset=3, rows=2, length=8, dtype=mx.float32, causal=False)
    assert (block == 0).tolist() == [[True] * 5 + [False] * 3]  # one row, broadcast


@pytest.mark.parametrize("kind", ["qwen3", "qwen3_5"])
def test_stable_verify_logits_match_exact_keys(tmp_path, kind: str) -> None:
    model, _ = load(str(write_tiny_model(tmp_path / kind, kind, seed=1)))
    prompt, block = mx.array([list(range(3, 40))]), mx.array([[5, 9, 2, 7]])
    exact, stable = make_cache(model, stable=False), make_cache(model, stable=True)
    assert any(isinstance(c, StableKVCache) for c in stable)
    model(prompt, cache=exact), model(prompt, cache=stable)
    want, got = model(block, cache=exact), model(block, cache=stable)
    assert mx.allclose(want, got, atol=1e-5, rtol=1e-5).item()
    assert mx.array_equal(mx.argmax(want, -1), mx.argmax(got, -1)).item()
