"""The prefill computes its LM head for the last row only, and what that leaves unchanged;
it runs in the device's chunks; a drafter's scores give the same greedy drafts read
narrow or widened to the vocabulary."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm.models.cache import make_prompt_cache

from drafter import decoding
from drafter.decoding import DraftScores, prefill
from drafter.forward import Forward
from tests.drafter.conftest import Pair

PROMPT = [5, 9, 3, 17, 2, 40, 8, 11, 6, 23, 4, 30]


def test_within_last_row_head_a_forward_returns_only_the_last_rows_logits(pair: Pair) -> None:
    tokens = mx.array(PROMPT)[None]
    full = pair.model(tokens, cache=make_prompt_cache(pair.model))
    with Forward(pair.model).last_row_head():
        last = pair.model(tokens, cache=make_prompt_cache(pair.model))
    assert full.shape[1] == len(PROMPT)
    assert last.shape == (1, 1, full.shape[2])
    np.testing.assert_allclose(np.array(last[0, 0]), np.array(full[0, -1]), rtol=1e-5, atol=1e-5)


def test_the_norm_gets_its_class_back_even_when_the_forward_fails(pair: Pair) -> None:
    norm = pair.model.model.norm
    plain = type(norm)
    try:
        with Forward(pair.model).last_row_head():
            assert type(norm) is not plain
            raise RuntimeError("a forward failed")
    except RuntimeError:
        pass
    assert type(norm) is plain
    out = pair.model(mx.array(PROMPT)[None], cache=make_prompt_cache(pair.model))
    assert out.shape[1] == len(PROMPT)


def test_prefill_returns_the_same_logits_and_cache_as_a_whole_forward(pair: Pair) -> None:
    cache = make_prompt_cache(pair.model)
    logits = prefill(Forward(pair.model), PROMPT, cache)
    reference_cache = make_prompt_cache(pair.model)
    full = pair.model(mx.array(PROMPT)[None], cache=reference_cache)[0, -1]
    np.testing.assert_allclose(np.array(logits), np.array(full), rtol=1e-5, atol=1e-5)
    assert int(mx.argmax(logits)) == int(mx.argmax(full))
    ours = tree_flatten([c.state for c in cache])
    theirs = tree_flatten([c.state for c in reference_cache])
    assert [name for name, _ in ours] == [name for name, _ in theirs]
    for (_, a), (_, b) in zip(ours, theirs, strict=True):
        assert (a is None and b is None) or mx.array_equal(a, b)


class Bare(nn.Module):
    """A model with no `model.norm`: last_row_head leaves it alone."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4, 6)

    def __call__(self, x: mx.array) -> mx.array:
        return self.head(x)


def test_a_model_without_a_final_norm_keeps_its_full_head() -> None:
    bare = Bare()
    x = mx.ones((1, 5, 4))
    with Forward(bare).last_row_head():
        out = bare(x)
    assert out.shape == (1, 5, 6)


def test_greedy_drafts_from_draft_vocabulary_scores_equal_the_full_rows_argmax() -> None:
    vocab = 50
    ids = mx.array([7, 3, 41, 0, 22, 9])  # a draft vocabulary, most frequent first
    scores = mx.random.normal((2, 3, 6), key=mx.random.key(1))  # 2 requests x 3 rows
    drafted = DraftScores(scores, ids, vocab)
    logits = drafted.logits()
    assert logits.shape == (2, 3, vocab)
    assert mx.array_equal(drafted.tokens(), mx.argmax(logits, axis=-1)).item()
    off = mx.array(sorted(set(range(vocab)) - set(ids.tolist())))
    assert mx.all(logits[..., off] == -mx.inf).item()
    assert mx.array_equal(logits[..., ids], scores).item()
    second = drafted[1]  # one request's rows of the batch
    assert mx.array_equal(second.tokens(), drafted.tokens()[1]).item()
    whole = DraftScores(logits)  # a full-vocabulary head: the scores are the logits
    assert whole.logits() is logits
    assert mx.array_equal(whole.tokens(), drafted.tokens()).item()


class Rows(nn.Module):
    """Records how many rows each forward takes; logits of zeros."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    def __call__(self, tokens: mx.array, cache: list[Any]) -> mx.array:
        self.calls.append(tokens.shape[1])
        return mx.zeros((*tokens.shape, 3))


@pytest.mark.parametrize(("cpu", "chunks"), [(True, [4, 4, 2]), (False, [8, 2])])
def test_a_prefill_runs_in_chunks_of_the_devices_prefill_step(
    monkeypatch: pytest.MonkeyPatch, cpu: bool, chunks: list[int]
) -> None:
    """The CPU's chunk is shorter (its attention computes every chunk's whole square of
    scores); elsewhere the GPU's."""
    monkeypatch.setattr(decoding, "CPU_PREFILL_STEP", 4)
    monkeypatch.setattr(decoding, "PREFILL_STEP", 8)
    monkeypatch.setattr(decoding, "on_cpu", lambda: cpu)
    model = Rows()
    prefill(Forward(model), list(range(10)), [])
    assert model.calls == chunks
