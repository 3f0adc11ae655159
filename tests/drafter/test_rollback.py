"""Rollback leaves the target's cache exactly as if only the kept rows had been fed.

Every case: prefill, checkpoint, verify n_verified rows in one forward,
rollback to n_keep rows, then decode greedily. The rolled-back cache must
continue like a reference cache that never saw the rejected rows.

Where equality is only to tolerance, the test says why; everywhere else the
logits are compared bitwise (mx.array_equal) and the token ids exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx.utils import tree_flatten
from mlx_lm import load
from mlx_lm.models.cache import (
    ArraysCache,
    ChunkedKVCache,
    KVCache,
    RotatingKVCache,
    make_prompt_cache,
)

from drafter.checkpoints.tiny import write_tiny_model
from drafter.forward import Forward
from drafter.rollback import checkpoint, rollback

PROMPT = [(7 * i + 3) % 256 for i in range(20)]
WIDTHS = (2, 4, 8, 16)
STEPS = 4  # greedy decode steps compared after each rollback
FIRST = 42  # token fed right after the rollback (the round's bonus token)
WINDOW = 12  # rotating cache size: smaller than the prompt, so it has wrapped

MakeCache = Callable[[], list[Any]]


def verify_rows(n: int) -> list[int]:
    return [(13 * i + 5) % 256 for i in range(n)]


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory: pytest.TempPathFactory) -> nn.Module:
    return load_prepared(tmp_path_factory.mktemp("rollback") / "qwen3", "qwen3")


@pytest.fixture(scope="module")
def qwen3_5(tmp_path_factory: pytest.TempPathFactory) -> nn.Module:
    return load_prepared(tmp_path_factory.mktemp("rollback") / "qwen3_5", "qwen3_5")


def load_prepared(path: Path, arch: str) -> nn.Module:
    model, _ = load(str(write_tiny_model(path, arch, seed=0)))
    Forward(model)
    return model


def feed(model: nn.Module, cache: list[Any], tokens: list[int]) -> None:
    if tokens:
        mx.eval(model(mx.array([tokens]), cache=cache))


def continuation(model: nn.Module, cache: list[Any]) -> tuple[list[mx.array], list[int]]:
    """Greedy decode STEPS tokens starting from FIRST; the logits and ids seen."""
    logits, ids, token = [], [], FIRST
    for _ in range(STEPS):
        row = model(mx.array([[token]]), cache=cache)[0, -1]
        token = mx.argmax(row).item()
        logits.append(row)
        ids.append(token)
    return logits, ids


def rolled_back(model: nn.Module, make: MakeCache, verify: list[int], n_keep: int) -> list[Any]:
    cache = make()
    feed(model, cache, PROMPT)
    ckpt = checkpoint(cache)
    feed(model, cache, verify)
    rollback(cache, ckpt, n_keep, len(verify))
    return cache


def one_call_reference(model: nn.Module, make: MakeCache, kept: list[int]) -> list[Any]:
    """Prompt, then only the kept rows, in one forward (the verify's call shape)."""
    cache = make()
    feed(model, cache, PROMPT)
    feed(model, cache, kept)
    return cache


def classic_reference(model: nn.Module, make: MakeCache, kept: list[int]) -> list[Any]:
    """Prompt, then only the kept rows, one token per forward (classic decode)."""
    cache = make()
    feed(model, cache, PROMPT)
    for token in kept:
        feed(model, cache, [token])
    return cache


def assert_bitwise(got: list[Any], want: list[Any], model: nn.Module, case: str) -> None:
    got_logits, got_ids = continuation(model, got)
    want_logits, want_ids = continuation(model, want)
    assert got_ids == want_ids, case
    for step, (a, b) in enumerate(zip(got_logits, want_logits, strict=True)):
        assert mx.array_equal(a, b).item(), f"{case}: logits differ at step {step}"


def assert_close(got: list[Any], want: list[Any], model: nn.Module, case: str) -> None:
    got_logits, got_ids = continuation(model, got)
    want_logits, want_ids = continuation(model, want)
    assert got_ids == want_ids, case
    for step, (a, b) in enumerate(zip(got_logits, want_logits, strict=True)):
        assert mx.allclose(a, b, rtol=0, atol=1e-4).item(), f"{case}: logits differ at step {step}"


def kv_cache(model: nn.Module) -> MakeCache:
    return lambda: make_prompt_cache(model)


def rotating_cache(model: nn.Module, keep: int) -> MakeCache:
    return lambda: [RotatingKVCache(max_size=WINDOW, keep=keep) for _ in model.layers]


@pytest.mark.parametrize("n_verified", WIDTHS)
def test_kv_cache_rollback_continues_bitwise_like_classic_decode(
    qwen3: nn.Module, n_verified: int
) -> None:
    make = kv_cache(qwen3)
    assert isinstance(make()[0], KVCache)
    verify = verify_rows(n_verified)
    for n_keep in range(n_verified + 1):
        got = rolled_back(qwen3, make, verify, n_keep)
        case = f"qwen3 KVCache n_verified={n_verified} n_keep={n_keep}"
        assert_bitwise(got, one_call_reference(qwen3, make, verify[:n_keep]), qwen3, case)
        # On MLX's CPU backend a B-row forward and B one-row forwards round identically.
        got = rolled_back(qwen3, make, verify, n_keep)
        assert_bitwise(got, classic_reference(qwen3, make, verify[:n_keep]), qwen3, case)


@pytest.mark.parametrize("n_verified", WIDTHS)
def test_gated_deltanet_rollback_recomputes_state_bitwise_like_classic_decode(
    qwen3_5: nn.Module, n_verified: int
) -> None:
    make = kv_cache(qwen3_5)
    kinds = {type(c) for c in make()}
    assert kinds == {ArraysCache, KVCache}
    verify = verify_rows(n_verified)
    for n_keep in range(n_verified + 1):
        got = rolled_back(qwen3_5, make, verify, n_keep)
        case = f"qwen3_5 n_verified={n_verified} n_keep={n_keep}"
        assert_bitwise(got, one_call_reference(qwen3_5, make, verify[:n_keep]), qwen3_5, case)
        got = rolled_back(qwen3_5, make, verify, n_keep)
        assert_bitwise(got, classic_reference(qwen3_5, make, verify[:n_keep]), qwen3_5, case)


@pytest.mark.parametrize("keep", [0, 4])
@pytest.mark.parametrize("n_verified", WIDTHS)
def test_wrapped_rotating_cache_rollback_continues_like_feeding_only_the_kept_rows(
    qwen3: nn.Module, n_verified: int, keep: int
) -> None:
    """keep=0 is the sliding-window layer cache; keep=4 is make_prompt_cache(max_kv_size).

    The kept rows are re-fed through the cache's own update, so the state
    equals that of one call with only those rows. Bitwise, except n_keep=1:
    the reference then takes the one-row in-place path, which attends over the
    rotated buffer instead of the verify's temporally ordered one; the kept
    row's keys/values (from the verify) differ in summation order, ~1e-6.
    """
    make = rotating_cache(qwen3, keep)
    verify = verify_rows(n_verified)
    for n_keep in range(n_verified + 1):
        got = rolled_back(qwen3, make, verify, n_keep)
        assert got[0].offset > WINDOW, "the cache must have wrapped"
        want = one_call_reference(qwen3, make, verify[:n_keep])
        case = f"RotatingKVCache keep={keep} n_verified={n_verified} n_keep={n_keep}"
        if n_keep == 1:
            assert_close(got, want, qwen3, case)
        else:
            assert_bitwise(got, want, qwen3, case)


@pytest.mark.parametrize("n_verified", WIDTHS)
def test_sliding_window_rollback_matches_classic_decode_to_rounding(
    qwen3: nn.Module, n_verified: int
) -> None:
    """With keep=0 a multi-row update sees the same window as one-row decode,
    but over a re-ordered buffer, so logits match classic decode only to ~1e-6.
    (With keep>0, mlx-lm's multi-row mask drops the kept sink tokens for rows
    after the first once wrapped, so no multi-row call matches classic decode.)"""
    make = rotating_cache(qwen3, keep=0)
    verify = verify_rows(n_verified)
    for n_keep in range(n_verified + 1):
        got = rolled_back(qwen3, make, verify, n_keep)
        want = classic_reference(qwen3, make, verify[:n_keep])
        assert_close(got, want, qwen3, f"n_verified={n_verified} n_keep={n_keep}")


def test_rotating_cache_that_wraps_during_verify_rolls_back_exactly(qwen3: nn.Module) -> None:
    make = rotating_cache(qwen3, keep=4)
    prompt_short = PROMPT[:6]  # 6 + 16 verify rows crosses the window mid-update
    verify = verify_rows(16)
    for n_keep in (0, 2, 5, 6, 7, 15, 16):
        cache = make()
        feed(qwen3, cache, prompt_short)
        ckpt = checkpoint(cache)
        feed(qwen3, cache, verify)
        rollback(cache, ckpt, n_keep, len(verify))
        want = make()
        feed(qwen3, want, prompt_short)
        feed(qwen3, want, verify[:n_keep])
        assert_bitwise(cache, want, qwen3, f"n_keep={n_keep}")


@pytest.mark.parametrize("arch", ["qwen3", "qwen3_5"])
def test_many_rounds_of_rollback_continue_bitwise_like_classic_decode(
    arch: str, qwen3: nn.Module, qwen3_5: nn.Module
) -> None:
    model = {"qwen3": qwen3, "qwen3_5": qwen3_5}[arch]
    make = kv_cache(model)
    rounds = [(4, 1), (4, 4), (2, 1), (8, 3), (16, 16), (5, 2), (3, 1), (16, 9)]
    cache = make()
    feed(model, cache, PROMPT)
    kept: list[int] = []
    for i, (n_verified, n_keep) in enumerate(rounds):
        verify = [(31 * i + 17 * j + 1) % 256 for j in range(n_verified)]
        ckpt = checkpoint(cache)
        feed(model, cache, verify)
        rollback(cache, ckpt, n_keep, n_verified)
        kept += verify[:n_keep]
    assert_bitwise(cache, classic_reference(model, make, kept), model, f"{arch} after rounds")


def test_full_acceptance_leaves_the_verify_state_untouched(qwen3_5: nn.Module) -> None:
    make = kv_cache(qwen3_5)
    verify = verify_rows(4)
    cache = make()
    feed(qwen3_5, cache, PROMPT)
    ckpt = checkpoint(cache)
    feed(qwen3_5, cache, verify)
    before = [list(c.cache) if isinstance(c, ArraysCache) else c.offset for c in cache]
    rollback(cache, ckpt, 4, 4)
    after = [list(c.cache) if isinstance(c, ArraysCache) else c.offset for c in cache]
    for b, a in zip(before, after, strict=True):
        if isinstance(b, list):
            assert all(x is y for x, y in zip(b, a, strict=True))
        else:
            assert b == a


def test_the_recording_class_is_given_once_and_keeps_weight_names(tmp_path: Path) -> None:
    model, _ = load(str(write_tiny_model(tmp_path / "m", "qwen3_5", seed=1)))
    names = [name for name, _ in tree_flatten(model.parameters())]
    Forward(model)
    hooked = type(model.layers[0].linear_attn)
    Forward(model)
    assert type(model.layers[0].linear_attn) is hooked
    assert hooked.__mro__[1].__name__ == "GatedDeltaNet"
    assert [name for name, _ in tree_flatten(model.parameters())] == names


def test_rollback_of_a_hybrid_target_run_outside_forward_names_the_problem(tmp_path: Path) -> None:
    model, _ = load(str(write_tiny_model(tmp_path / "m", "qwen3_5", seed=2)))
    cache = make_prompt_cache(model)
    feed(model, cache, PROMPT)
    ckpt = checkpoint(cache)
    feed(model, cache, verify_rows(4))
    with pytest.raises(ValueError, match="drafter.forward"):
        rollback(cache, ckpt, 2, 4)


def test_rollback_rejects_counts_that_do_not_match_the_verify(qwen3: nn.Module) -> None:
    cache = make_prompt_cache(qwen3)
    feed(qwen3, cache, PROMPT)
    ckpt = checkpoint(cache)
    feed(qwen3, cache, verify_rows(4))
    with pytest.raises(ValueError, match="n_keep=5"):
        rollback(cache, ckpt, 5, 4)
    with pytest.raises(ValueError, match="advanced by 4 rows, expected 3"):
        rollback(cache, ckpt, 1, 3)


def test_checkpoint_refuses_caches_it_cannot_roll_back() -> None:
    with pytest.raises(TypeError, match="ChunkedKVCache"):
        checkpoint([ChunkedKVCache(chunk_size=8)])
