"""The polyexp SwiGLU: within float32 rounding of the true function, the same bits for a
row whatever rows stand beside it, and swapped into a real model's feed-forward layers
(and back) without touching anything else."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx_lm.models.activations import swiglu as mlx_swiglu
from mlx_lm.models.cache import make_prompt_cache

from drafter import polyexp
from drafter.activation import calls_mlx_swiglu
from drafter.decoding import prefill
from drafter.forward import Forward, set_activation
from drafter.rowwise import MAX_ROWS
from tests.drafter.conftest import Pair, engine_on


def test_swiglu_is_within_float32_rounding_of_float64_silu_times_x() -> None:
    key = mx.random.key(0)
    gate = mx.random.uniform(-100.0, 100.0, (100_000,), key=key)
    x = mx.random.normal((100_000,), key=mx.random.split(key)[0])
    g, v = np.array(gate).astype(np.float64), np.array(x).astype(np.float64)
    want = g * v / (1.0 + np.exp(-g))
    got = np.array(polyexp.swiglu(gate, x)).astype(np.float64)
    assert np.all(np.abs(got - want) <= 1e-6 * np.abs(want) + 1e-30)


@pytest.mark.parametrize("width", [1536, 1537])
def test_a_rows_swiglu_has_the_same_bits_alone_and_beside_other_rows(width: int) -> None:
    key = mx.random.key(width)
    gate = 8 * mx.random.normal((37, width), key=key)
    x = mx.random.normal((37, width), key=mx.random.split(key)[0])
    together = np.array(polyexp.swiglu(gate, x))
    for rows in (1, 2, 3, 8):
        for start in range(0, 37 - rows + 1, 9):
            alone = np.array(polyexp.swiglu(gate[start : start + rows], x[start : start + rows]))
            assert np.array_equal(alone, together[start : start + rows])


class NotSwiGLU(nn.Module):
    def __call__(self, x: mx.array) -> mx.array:
        return nn.silu(x)


def test_only_classes_that_call_mlx_lms_swiglu_are_hooked(pair: Pair) -> None:
    mlps = [m for m in pair.model.modules() if calls_mlx_swiglu(type(m))]
    assert mlps, "the tiny target's feed-forward layers call mlx-lm's swiglu"
    assert not calls_mlx_swiglu(nn.Linear)
    assert not calls_mlx_swiglu(NotSwiGLU)


def test_polyexp_activation_swaps_every_feed_forward_layer_and_mlx_swaps_them_back(
    pair: Pair,
) -> None:
    model = pair.model
    forward = Forward(model)  # recurrent layers get their recording class first
    classes = {name: type(m) for name, m in model.named_modules()}
    tokens = pair.tokenizer.encode("def quicksort(items):\n    return sorted(items)")
    plain = prefill(forward, tokens, make_prompt_cache(model))
    try:
        swapped = set_activation(model, "polyexp")
        assert swapped == sum(calls_mlx_swiglu(c) for c in classes.values()) > 0
        assert set_activation(model, "polyexp") == 0  # already there
        hooked = prefill(forward, tokens, make_prompt_cache(model))
        np.testing.assert_allclose(np.array(hooked), np.array(plain), rtol=1e-4, atol=1e-4)
        changed = {n for n, m in model.named_modules() if type(m) is not classes[n]}
        assert len(changed) == swapped
        assert all(
            type(m).__name__ == "Polyexp" + classes[n].__name__
            for n, m in model.named_modules()
            if n in changed
        )
    finally:
        assert set_activation(model, "mlx") == swapped
    assert {name: type(m) for name, m in model.named_modules()} == classes
    again = prefill(forward, tokens, make_prompt_cache(model))
    assert np.array_equal(np.array(again), np.array(plain))


def test_an_unknown_activation_is_an_error_naming_it(pair: Pair) -> None:
    with pytest.raises(ValueError, match="activation 'gelu' is none of"):
        set_activation(pair.model, "gelu")
    assert all(not type(m).__name__.startswith("Polyexp") for m in pair.model.modules())


def test_mlx_swiglu_is_what_the_polyexp_one_stands_for() -> None:
    gate = mx.array([-3.0, -0.5, 0.0, 0.5, 3.0])
    x = mx.array([1.0, 2.0, 3.0, 4.0, 5.0])
    np.testing.assert_allclose(
        np.array(polyexp.swiglu(gate, x)), np.array(mlx_swiglu(gate, x)), rtol=1e-6
    )


def test_prefill_activation_takes_polyexp_for_prefill_chunks_and_mlx_for_decode_rows(
    pair: Pair,
) -> None:
    """A sequence longer than MAX_ROWS (a prefill chunk) gets polyexp's SwiGLU bits; a
    one-row step, a verify block and a batch of verify blocks (more rows in all than
    MAX_ROWS, each no longer than it) keep mlx-lm's bits."""
    mlp = next(m for m in pair.model.modules() if calls_mlx_swiglu(type(m)))
    hidden = mlp.gate_proj.weight.shape[1]
    key = mx.random.key(5)
    long = 4 * mx.random.normal((1, MAX_ROWS + 1, hidden), key=key)
    short = [
        4 * mx.random.normal(s, key=key) for s in [(1, 1, hidden), (1, 8, hidden), (4, 8, hidden)]
    ]
    plain_long, plain_short = mlp(long), [mlp(x) for x in short]
    try:
        set_activation(pair.model, "polyexp")
        polyexp_long = mlp(long)
        assert set_activation(pair.model, "prefill") > 0
        assert type(mlp).__name__.startswith("PrefillPolyexp")
        assert np.array_equal(np.array(mlp(long)), np.array(polyexp_long))
        assert not np.array_equal(np.array(polyexp_long), np.array(plain_long))
        for x, want in zip(short, plain_short, strict=True):
            assert np.array_equal(np.array(mlp(x)), np.array(want))
    finally:
        set_activation(pair.model, "mlx")
    assert not any(type(m).__name__.startswith("Prefill") for m in pair.model.modules())


def test_a_prefill_activation_speculative_engine_decodes_as_its_classic_engine(
    pair: Pair,
) -> None:
    """With a prompt long enough for a polyexp prefill, greedy speculative output equals
    classic decode under the same activation: both prefill alike and decode with
    mlx-lm's SwiGLU."""
    from drafter.sampling import SamplingParams

    prompt = list(b"The quick brown fox jumps over the lazy dog, twice over.")
    assert len(prompt) > MAX_ROWS
    engine = engine_on(pair, pair.drafter, 4, activation="prefill")

    def decode(width: int | None) -> list[int]:
        steps = engine.generate(prompt, 24, SamplingParams(), ignore_eos=True, width=width)
        return [t.id for step in steps for t in step]

    try:
        assert decode(4) == decode(None)
    finally:
        engine.use(activation="mlx")
