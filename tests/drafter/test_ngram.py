"""Prompt-lookup drafting (drafter/ngram.py): what the lookup proposes, and lookup
speculation equal to classic decode, alone and batched, through the served decoder."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from drafter.batch import BatchDecoder
from drafter.checkpoints.tiny import write_tiny_model
from drafter.decoding import GenerationStats
from drafter.loading import LoadOptions, load_engine
from drafter.ngram import History, NgramDrafter
from drafter.probe import probe_exactness
from drafter.sampling import SamplingParams
from tests.drafter.conftest import Pair, batched_and_solo, engine_on

# A prompt that repeats itself, so the lookup finds spans to copy.
COPYING = list(b"one two three four. one two three four. one two three four. one two")
TOKENS = 40


def lookup(tokens: list[int], count: int) -> list[int]:
    return History(tokens).follow(count)


def test_the_longest_recent_suffix_proposes_what_followed_its_latest_occurrence() -> None:
    assert lookup([1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3], 4) == [7, 1, 2, 3]  # the latest one
    assert lookup([5, 6, 1, 2, 8, 5, 6, 1, 2], 2) == [8, 5]  # at most `count`
    assert lookup([4, 1, 2, 9, 9, 3, 1, 2], 3) == [9, 9, 3]  # a 2-gram is enough
    assert lookup([1, 2, 3, 4, 5], 3) == []  # nothing recurs
    assert lookup([1, 7, 2, 7], 3) == []  # one repeated token is no match
    assert lookup([], 3) == []


def scanned(tokens: list[int], count: int, shortest: int) -> list[int]:
    """The lookup by a scan of every earlier position: what the index must give."""
    for n in range(min(4, len(tokens) - 1), max(shortest, 2) - 1, -1):
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start : start + n] == tokens[-n:]:
                return tokens[start + n : start + n + count]
    return []


@pytest.mark.parametrize("seed", range(4))
def test_the_index_finds_what_a_scan_of_the_tokens_finds(seed: int) -> None:
    rng = random.Random(seed)
    history = History()
    tokens: list[int] = []
    for _ in range(300):
        step = [rng.randrange(5) for _ in range(rng.randrange(1, 4))]  # few ids: many repeats
        history.extend(step)
        tokens += step
        for count, shortest in ((1, 2), (7, 2), (7, 4)):
            assert history.follow(count, shortest) == scanned(tokens, count, shortest)


def ids(engine_tokens: list[list[int]]) -> list[int]:
    return [t for step in engine_tokens for t in step]


@pytest.mark.parametrize("width", [2, 5, 8])
def test_greedy_lookup_speculation_equals_classic(pair: Pair, width: int) -> None:
    vocab = engine_on(pair).vocab_size
    reference = [
        t.id for s in engine_on(pair).generate(COPYING, TOKENS, SamplingParams()) for t in s
    ]
    stats = GenerationStats()
    engine = engine_on(pair, NgramDrafter(vocab), width)
    out = [t.id for s in engine.generate(COPYING, TOKENS, SamplingParams(), stats) for t in s]
    assert out == reference
    assert stats.rounds > 0 and stats.drafted <= stats.rounds * (width - 1)


def test_a_lone_step_without_a_match_is_the_pipelined_classic_step(pair: Pair) -> None:
    """Where the lookup finds nothing the step is classic decode's, its next forward
    queued before this one is read; a match takes the queued token first, then drafts."""
    engine = engine_on(pair, NgramDrafter(engine_on(pair).vocab_size), 6)
    prompt = list(b"no repeats here at all")
    reference = [
        t.id for s in engine_on(pair).generate(prompt, TOKENS, SamplingParams()) for t in s
    ]
    decoder = BatchDecoder(engine)
    sequence = decoder.start(prompt, TOKENS, SamplingParams(), GenerationStats())
    out = [t.id for t in decoder.advance_prefill(sequence)]
    while not out:
        out = [t.id for t in decoder.advance_prefill(sequence)]
    queued = drafted = 0
    while not sequence.done:
        matched = engine.drafter is not None and engine.drafter.proposes(
            sequence.session.draft_cache
        )
        decoder.step([sequence], 6)
        queued += sequence.queued is not None and not matched
        drafted += matched
        out += [t.id for t in sequence.tokens]
    assert out == reference
    assert queued > 0  # steps without a match ran pipelined
    assert drafted > 0  # the model's own output repeats, so some steps drafted


def test_lookup_requests_batched_equal_their_solo_outputs(pair: Pair) -> None:
    engine = engine_on(pair, NgramDrafter(engine_on(pair).vocab_size), 6)
    prompts = [COPYING, COPYING[5:], list(b"no repeats here at all")]
    together, solo = batched_and_solo(engine, prompts, TOKENS)
    assert together == solo


def test_the_probe_proves_a_lookup_engine_exact(pair: Pair) -> None:
    engine = engine_on(pair, NgramDrafter(engine_on(pair).vocab_size), 8)
    assert probe_exactness(engine, prompt=COPYING, tokens=24).exactness == "exact"


def test_a_load_with_the_ngram_kind_needs_no_drafter_and_names_it(tmp_path: Path) -> None:
    target = write_tiny_model(tmp_path / "target", "qwen3")
    options = LoadOptions(tmp_path / "cache", str(target), draft_kind="ngram", warm_up=False)
    loaded = load_engine(options)
    config = loaded.speculative_config()
    assert isinstance(loaded.engine.drafter, NgramDrafter)
    assert (config["drafter"], config["block_size"], config["source"]) == ("ngram", 8, "default")
    assert config["speculative"] is True and config["exactness"] == "exact"
    plain = load_engine(LoadOptions(tmp_path / "cache", str(target), "none", draft_kind="ngram"))
    assert plain.engine.drafter is None and plain.speculative_config()["drafter"] == "none"
