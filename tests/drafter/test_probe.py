"""The exactness probe compares greedy classic and speculative output at the resolved width."""

from __future__ import annotations

from typing import Any

import pytest
from mlx_lm import load

from drafter.dflash import load_drafter, write_random_drafter
from drafter.engine import Engine
from drafter.probe import PROBE_PROMPTS, ProbeResult, first_difference, probe_exactness
from drafter.sampling import SamplingParams
from drafter.tiny import write_tiny_model


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
def test_probe_finds_the_tiny_pair_exact_at_the_resolved_width(pair, width: int) -> None:
    result = probe_exactness(engine(pair, width), tokens=12)
    compared = 12 * len(PROBE_PROMPTS)  # every probe prompt, code and prose
    assert result == ProbeResult(width=width, tokens=compared, first_difference=None)
    assert result.exact and result.summary == "exact"


def test_probe_compares_the_full_count_even_past_eos(pair) -> None:
    _, tokenizer, _ = pair
    steps = engine(pair, None).classic_generate([1, 2, 3], 1, SamplingParams())
    first = [t.id for step in steps for t in step]
    saved = tokenizer.eos_token_ids
    tokenizer.eos_token_ids = set(first)
    try:
        result = probe_exactness(engine(pair, 4), prompt=[1, 2, 3], tokens=10)
        assert result.exact and result.tokens == 10
    finally:
        tokenizer.eos_token_ids = saved


def test_probe_refuses_an_engine_without_a_drafter(pair) -> None:
    with pytest.raises(ValueError, match="needs an engine with a drafter"):
        probe_exactness(engine(pair, None))


def test_first_difference_is_the_first_differing_position() -> None:
    assert first_difference([1, 2, 3, 4], [1, 2, 3, 4]) is None
    assert first_difference([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert first_difference([5, 2], [6, 2]) == 0
    assert first_difference([1, 2, 3], [1, 2]) == 2


def test_a_difference_is_summarised_with_its_position() -> None:
    result = ProbeResult(width=4, tokens=64, first_difference=17)
    assert not result.exact
    assert result.summary == "differs@17"


def test_a_difference_in_a_later_prompt_names_that_prompt() -> None:
    result = ProbeResult(width=4, tokens=128, first_difference=40, prompt_index=1)
    assert result.summary == "differs@40 (prompt 2)"
