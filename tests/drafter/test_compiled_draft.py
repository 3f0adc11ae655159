"""The drafter's forward in compiled stages: the same scores bit for bit as the forward as
written, for every context size and attention mode; traced once per context size at
warm-up; made and dropped with the engine's activation and layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx_lm import load

from drafter.checkpoints.tiny import write_tiny_model
from drafter.compiled_draft import CompiledDraft
from drafter.dflash import DFlashDrafter, load_drafter, write_random_drafter
from tests.drafter.conftest import Pair, engine_on

CONTEXT_SIZES = [0, 3, 1, 9, 5, 2, 8]  # new context rows per round: 0 right after ingest


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("target") / "qwen3", "qwen3", seed=1)


@pytest.fixture(scope="module")
def target(target_dir: Path) -> nn.Module:
    return load(str(target_dir))[0]


@pytest.fixture(scope="module")
def drafter_dir(tmp_path_factory: pytest.TempPathFactory, target_dir: Path) -> Path:
    """Three layers: a first, a middle and a last stage."""
    root = tmp_path_factory.mktemp("drafter")
    return write_random_drafter(root / "d", target_dir, num_layers=3, block_size=8)


def context_rows(drafter: DFlashDrafter, rows: int, seed: int) -> mx.array:
    width = len(drafter.target_layer_ids) * drafter.args.hidden_size
    return mx.random.normal((1, rows, width), key=mx.random.key(seed))


def draft_rounds(drafter: DFlashDrafter, attention: str, width: int = 8) -> list[Any]:
    """A prompt's ingest, then a round for each of CONTEXT_SIZES: each round's scores and
    the cache's offset after it."""
    cache = drafter.make_cache(attention)
    drafter.ingest(context_rows(drafter, 20, seed=0), cache)
    out = []
    for i, rows in enumerate(CONTEXT_SIZES):
        scores = drafter.draft_scores(5 + i, context_rows(drafter, rows, i + 1), cache, width)
        out.append((np.array(scores.scores), cache[0].offset))
    return out


@pytest.mark.parametrize("linear", ["matrix", "rowwise"])
@pytest.mark.parametrize("attention", ["exact", "vector", "stable", "polyexp"])
def test_staged_drafts_equal_the_forward_as_written_for_every_context_size(
    drafter_dir: Path, target: nn.Module, attention: str, linear: str
) -> None:
    plain, staged = load_drafter(drafter_dir, target), load_drafter(drafter_dir, target)
    plain.set_linear(linear)
    staged.set_linear(linear)
    staged.set_activation("compiled")
    assert staged.staged is not None and plain.staged is None
    for (want, want_offset), (got, got_offset) in zip(
        draft_rounds(plain, attention), draft_rounds(staged, attention), strict=True
    ):
        assert np.array_equal(want, got)
        assert want_offset == got_offset


def counting_traces(staged: CompiledDraft) -> list[int]:
    """A counter of the stages' traces: `start` runs only while a stage is traced."""
    count = [0]
    start = staged.start

    def counted(*args: Any) -> list[mx.array]:
        count[0] += 1
        return start(*args)

    staged.start = counted  # type: ignore[method-assign]
    return count


def test_after_warm_up_no_round_of_that_width_traces_a_stage(
    drafter_dir: Path, target: nn.Module
) -> None:
    drafter = load_drafter(drafter_dir, target)
    drafter.set_activation("compiled")
    assert drafter.staged is not None
    traces = counting_traces(drafter.staged)
    drafter.warm(4, "exact")
    assert traces[0] == 6 * 3, "each of 0-5 new context rows traces the 3 layers' stages"
    cache = drafter.make_cache("exact")
    for rows in range(6):
        mx.eval(drafter.draft_scores(1, context_rows(drafter, rows, rows), cache, 4).tokens())
    assert traces[0] == 6 * 3
    mx.eval(drafter.draft_scores(1, context_rows(drafter, 2, 9), cache, 6).tokens())
    assert traces[0] > 6 * 3, "a block of another width is another shape"


def test_a_batched_draft_runs_as_written_and_equals_each_requests_staged_draft(
    drafter_dir: Path, target: nn.Module
) -> None:
    drafter = load_drafter(drafter_dir, target)
    drafter.set_activation("compiled")
    caches = [drafter.make_cache() for _ in range(3)]
    alone_caches = [drafter.make_cache() for _ in range(3)]
    more = [context_rows(drafter, n, seed=20 + n) for n in (2, 1, 5)]
    alone = [
        drafter.draft_scores(a, f, c, width=4).logits()
        for a, f, c in zip([4, 8, 9], more, alone_caches, strict=True)
    ]
    batched = drafter.draft_scores_batch([4, 8, 9], more, caches, width=4)
    for b in range(3):
        assert mx.allclose(batched[b].logits(), alone[b], atol=1e-5).item()


def test_the_compiled_activation_stages_the_drafter_and_a_new_layout_traces_anew(
    pair: Pair,
) -> None:
    engine = engine_on(pair, pair.drafter, 4, attention="exact", linear="matrix", activation="mlx")
    try:
        assert pair.drafter.staged is None
        engine.activation = "compiled"
        first = pair.drafter.staged
        assert first is not None
        engine.linear = "rowwise"
        assert pair.drafter.staged is not None and pair.drafter.staged is not first
    finally:
        engine.activation = "mlx"
        engine.linear = "matrix"
    assert pair.drafter.staged is None
