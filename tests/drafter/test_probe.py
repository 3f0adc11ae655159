"""The exactness probe compares greedy classic and speculative output at the resolved width."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import pytest
from mlx_lm import load

import drafter.rollback
from drafter.checkpoints.tiny import write_tiny_model
from drafter.dflash import load_drafter, write_random_drafter
from drafter.engine import Engine
from drafter.probe import (
    PROBE_PROMPTS,
    Divergence,
    ProbeResult,
    batched_teacher_forced_logits,
    classic_tokens,
    first_difference,
    probe_exactness,
    teacher_forced_logits,
)
from drafter.sampling import SamplingParams


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any]:
    root = tmp_path_factory.mktemp("probe")
    target_dir = write_tiny_model(root / "target", "qwen3_5", seed=4)
    model, tokenizer = load(str(target_dir))
    drafter = load_drafter(write_random_drafter(root / "drafter", target_dir), model)
    return model, tokenizer, drafter


def engine(pair: tuple[Any, Any, Any], width: int | None) -> Engine:
    model, tokenizer, drafter = pair
    return Engine(
        model,
        tokenizer,
        model_id="tiny",
        context_length=2048,
        drafter=drafter if width else None,
        block_size=width,
    )


@pytest.mark.parametrize("width", [3, 16])
def test_probe_finds_the_tiny_pair_exact_at_the_resolved_width(
    pair: tuple[Any, Any, Any], width: int
) -> None:
    result = probe_exactness(engine(pair, width), tokens=12)
    assert result.tokens == 12 * len(PROBE_PROMPTS)  # every probe prompt, code and prose
    assert result.divergences == ()
    assert result.exact and result.exactness == "exact"
    assert 0.0 <= result.kernel_noise < 1e-3  # float32 on CPU: one-row and w-row agree closely


def test_the_batched_noise_feeds_each_prompt_its_own_rows(pair: tuple[Any, Any, Any]) -> None:
    """Every probe prompt in one forward (attention and recurrent layers shared, prompts
    of different lengths) predicts what each predicts alone: the batched shapes' noise
    is rounding, not rows read from the wrong request."""
    spec = engine(pair, 4)
    prompts = [spec.tokenizer.encode(text) for text in PROBE_PROMPTS]
    assert len({len(p) for p in prompts}) > 1
    classics = [classic_tokens(spec, ids, 9) for ids in prompts]
    together = batched_teacher_forced_logits(spec, prompts, classics, rows=4)
    for ids, classic, rows in zip(prompts, classics, together, strict=True):
        alone = teacher_forced_logits(spec, ids, classic, rows=1)
        assert rows.shape == alone.shape == (8, spec.vocab_size)
        assert mx.max(mx.abs(rows - alone)).item() < 1e-3
    swapped = batched_teacher_forced_logits(spec, prompts[::-1], classics[::-1], rows=4)
    assert mx.max(mx.abs(swapped[0] - together[1])).item() < 1e-3
    assert mx.max(mx.abs(together[0] - together[1])).item() > 1e-2  # the prompts differ


def test_a_rollback_that_keeps_one_row_too_many_is_a_defect(
    pair: tuple[Any, Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = drafter.rollback.rollback

    def keeps_one_more(cache: list[Any], ckpt: Any, n_keep: int, n_verified: int) -> None:
        real(cache, ckpt, min(n_keep + 1, n_verified), n_verified)

    monkeypatch.setattr(drafter.rollback, "rollback", keeps_one_more)
    result = probe_exactness(engine(pair, 4), tokens=16)
    assert result.exactness == "differs"
    assert result.defects and all(d.margin > result.tolerance for d in result.defects)


def test_a_choice_read_from_the_wrong_verify_row_is_a_defect(
    pair: tuple[Any, Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from drafter.speculative import Session

    real = Session.row_scores

    def shifted(self: Session, logits: mx.array, drafts: mx.array) -> mx.array:
        rows = real(self, logits, drafts)
        return mx.concatenate([rows[1:], rows[-1:]])  # row i answers for row i + 1

    monkeypatch.setattr(Session, "row_scores", shifted)
    result = probe_exactness(engine(pair, 4), tokens=16)
    assert result.exactness == "differs"


class NoisyWideForwards:
    """The target, but every multi-row forward adds noise of up to `scale` to its
    logits, a fixed function of the position and tokens (like a kernel's rounding,
    the same input gives the same output): what a w-row kernel looks like."""

    def __init__(self, model: Any, scale: float) -> None:
        self.inner, self.scale = model, scale

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __call__(self, inputs: mx.array, cache: Any = None) -> mx.array:
        logits = self.inner(inputs, cache=cache)
        if inputs.shape[1] == 1:
            return logits
        offset = next(c.offset for c in cache if hasattr(c, "offset"))
        seed = hash((offset, tuple(inputs[0].tolist()))) % 2**31
        noise = mx.random.uniform(-1, 1, logits.shape, key=mx.random.key(seed))
        return logits + self.scale * noise


def test_divergences_at_ties_within_the_kernel_noise_are_rounding(
    pair: tuple[Any, Any, Any],
) -> None:
    model, tokenizer, drafter_ = pair
    noisy = Engine(
        NoisyWideForwards(model, scale=0.5),
        tokenizer,
        model_id="tiny",
        context_length=2048,
        drafter=drafter_,
        block_size=4,
    )
    result = probe_exactness(noisy, tokens=48)
    assert 0.0 < result.kernel_noise <= 0.5
    assert result.divergences, "the noise should flip some near-tied argmax"
    assert result.exactness == "rounding"
    assert all(d.margin <= result.tolerance for d in result.divergences)


def test_probe_compares_the_full_count_even_past_eos(pair: tuple[Any, Any, Any]) -> None:
    _, tokenizer, _ = pair
    steps = engine(pair, None).generate([1, 2, 3], 1, SamplingParams(), width=None)
    first = [t.id for step in steps for t in step]
    saved = tokenizer.eos_token_ids
    tokenizer.eos_token_ids = set(first)
    try:
        result = probe_exactness(engine(pair, 4), prompt=[1, 2, 3], tokens=10)
        assert result.exact and result.tokens == 10
    finally:
        tokenizer.eos_token_ids = saved


def test_probe_refuses_an_engine_without_a_drafter(pair: tuple[Any, Any, Any]) -> None:
    with pytest.raises(ValueError, match="needs an engine with a drafter"):
        probe_exactness(engine(pair, None))


def test_first_difference_is_the_first_differing_position() -> None:
    assert first_difference([1, 2, 3, 4], [1, 2, 3, 4]) is None
    assert first_difference([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert first_difference([5, 2], [6, 2]) == 0
    assert first_difference([1, 2, 3], [1, 2]) == 2


def test_classes_follow_the_margins_against_twice_the_noise() -> None:
    tie = Divergence(0, 5, 10, 11, margin=0.06)
    wide = Divergence(1, 9, 10, 12, margin=3.0)
    assert ProbeResult(4, 128, kernel_noise=0.5).exactness == "exact"
    rounding = ProbeResult(4, 128, kernel_noise=0.5, divergences=(tie,))
    assert rounding.exactness == "rounding" and rounding.defects == ()
    differs = ProbeResult(4, 128, kernel_noise=0.5, divergences=(tie, wide))
    assert differs.exactness == "differs" and differs.defects == (wide,)
    assert differs.fields() == {
        "exactness": "differs",
        "divergences": 2,
        "max_margin": 3.0,
        "kernel_noise": 0.5,
        "probe_tokens": 128,
    }
