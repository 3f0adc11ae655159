"""DFlash with prompt lookup beside it (drafter/hybrid.py): a long copy replaces the
DFlash block and DFlash's context keeps up; greedy output equals classic decode, alone
and batched, and the probe proves it."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import pytest

from drafter.checkpoints.tiny import write_tiny_model
from drafter.decoding import GenerationStats
from drafter.dflash import target_dims, write_random_drafter
from drafter.hybrid import LONG_MATCH, HybridDrafter
from drafter.loading import LoadOptions, load_engine
from drafter.probe import probe_exactness
from drafter.sampling import SamplingParams
from tests.drafter.conftest import Pair, batched_and_solo, engine_on

WIDTH = 4
COPYING = list(b"one two three four. one two three four. one two three four. one two")
TOKENS = 40


def features(pair: Pair, rows: int) -> mx.array:
    """(1, rows, n_taps * H) context rows of the width the drafter reads."""
    width = len(pair.drafter.target_layer_ids) * target_dims(pair.model)[0]
    return mx.random.normal((1, rows, width), key=mx.random.key(rows))


def test_a_copy_filling_the_block_replaces_dflash_and_its_context_keeps_up(pair: Pair) -> None:
    hybrid = HybridDrafter(pair.drafter, engine_on(pair).vocab_size)
    cache = hybrid.make_cache()
    hybrid.observe([5, 6, 7, 8, 1, 2, 3, 4, 9, 5, 6, 7, 8], cache)  # 5 6 7 8 recurs
    drafted = hybrid.draft_scores(8, features(pair, 3), cache, WIDTH)
    assert drafted.tokens().tolist() == [1, 2, 3]  # what followed, the block's length
    assert all(layer.offset == 3 for layer in cache[:-1])  # the context rows went in


def test_a_copy_right_after_the_prompt_takes_in_no_context_rows(pair: Pair) -> None:
    """The first round after a prefill has no new context rows (the prompt's went in
    with it): a copy then drafts, and DFlash's context stays as the prefill left it."""
    hybrid = HybridDrafter(pair.drafter, engine_on(pair).vocab_size)
    cache = hybrid.make_cache()
    hybrid.ingest(features(pair, 3), cache)  # the prompt's rows
    hybrid.observe([5, 6, 7, 8, 1, 2, 3, 4, 9, 5, 6, 7, 8], cache)
    drafted = hybrid.draft_scores(8, features(pair, 3)[:, :0], cache, WIDTH)
    assert drafted.tokens().tolist() == [1, 2, 3]
    assert all(layer.offset == 3 for layer in cache[:-1])


def test_a_short_or_missing_copy_leaves_the_block_to_dflash(pair: Pair) -> None:
    hybrid = HybridDrafter(pair.drafter, engine_on(pair).vocab_size)
    short = [6, 7, 8, 1, 2, 9, 7, 8]  # a 2-gram recurs: below LONG_MATCH
    at_end = [7, 1, 2, 1, 2, 1, 2]  # LONG_MATCH tokens recur, 2 follow: short of 3
    assert LONG_MATCH == 4
    for tokens in (short, at_end, [1, 2, 3, 4, 5, 6, 7]):
        cache = hybrid.make_cache()
        hybrid.observe(tokens, cache)
        twin = pair.drafter.make_cache()
        context = features(pair, 3)
        got = hybrid.draft_scores(tokens[-1], context, cache, WIDTH).tokens()
        want = pair.drafter.draft_scores(tokens[-1], context, twin, WIDTH).tokens()
        assert got.tolist() == want.tolist()


@pytest.mark.parametrize("width", [2, 4, 8])
def test_greedy_hybrid_speculation_equals_classic(pair: Pair, width: int) -> None:
    hybrid = HybridDrafter(pair.drafter, engine_on(pair).vocab_size)
    reference = [
        t.id for s in engine_on(pair).generate(COPYING, TOKENS, SamplingParams()) for t in s
    ]
    stats = GenerationStats()
    engine = engine_on(pair, hybrid, width)
    out = [t.id for s in engine.generate(COPYING, TOKENS, SamplingParams(), stats) for t in s]
    assert out == reference
    assert stats.rounds > 0


def test_hybrid_requests_batched_equal_their_solo_outputs(pair: Pair) -> None:
    engine = engine_on(pair, HybridDrafter(pair.drafter, engine_on(pair).vocab_size), WIDTH)
    prompts = [COPYING, COPYING[5:], list(b"no repeats here at all")]
    together, solo = batched_and_solo(engine, prompts, TOKENS)
    assert together == solo


def test_the_probe_proves_a_hybrid_engine_exact(pair: Pair) -> None:
    engine = engine_on(pair, HybridDrafter(pair.drafter, engine_on(pair).vocab_size), 8)
    assert probe_exactness(engine, prompt=COPYING, tokens=24).exactness == "exact"


def test_a_load_with_the_hybrid_kind_takes_dflashs_width_and_names_both(tmp_path: Path) -> None:
    target = write_tiny_model(tmp_path / "target", "qwen3")
    drafter = write_random_drafter(tmp_path / "drafter", target, num_layers=1)
    options = LoadOptions(
        tmp_path / "cache", str(target), str(drafter), draft_kind="hybrid", warm_up=False
    )
    loaded = load_engine(options)
    config = loaded.speculative_config()
    assert isinstance(loaded.engine.drafter, HybridDrafter)
    assert config["drafter"] == f"{drafter} + ngram"
    dflash = load_engine(LoadOptions(tmp_path / "cache", str(target), str(drafter), warm_up=False))
    assert config["block_size"] == dflash.speculative_config()["block_size"]
    assert config["speculative"] is True
