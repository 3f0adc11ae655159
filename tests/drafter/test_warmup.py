"""The startup warm-up (drafter/warmup.py): which requests it runs, and that it leaves
nothing of them behind for the clients that follow."""

from __future__ import annotations

import time

import pytest

from drafter.attention import STEP
from drafter.batch import BatchDecoder, run_alone
from drafter.decoding import GenerationStats
from drafter.engine import Engine
from drafter.prompt_cache import PromptCache
from drafter.sampling import SamplingParams
from drafter.vector_rows import VECTOR_TWO_PASS_KEYS
from drafter.warmup import (
    TEXT,
    WARM_KEYS,
    crossing_rows,
    ending_with,
    later_round_starts,
    warm_crossings,
    warm_prompts,
    warm_up,
)
from tests.drafter.conftest import Pair

WIDTH = 4


def engine_of(pair: Pair, context_length: int, attention: str | None = None) -> Engine:
    return Engine(
        pair.model,
        pair.tokenizer,
        model_id="tiny",
        context_length=context_length,
        drafter=pair.drafter,
        block_size=WIDTH,
        attention=attention,
    )


def test_warm_up_leaves_the_prompt_cache_as_it_found_it(pair: Pair) -> None:
    engine = engine_of(pair, 600)  # warm-up requests of 264 tokens only: a quick test
    cache = engine.prompt_cache = PromptCache(2**30)
    client = pair.tokenizer.encode("a client's prompt, cached before the warm-up")
    list(engine.generate(client, 2, SamplingParams(), ignore_eos=True, width=None))
    before = list(cache.entries)
    assert before == [tuple(client)]

    warmed = warm_up(engine, budget_s=60.0)
    assert warmed.seconds >= 0 and warmed.unmet == 0  # exact attention: no crossings to meet
    assert engine.prompt_cache is cache
    assert list(cache.entries) == before
    assert (cache.hits, cache.misses) == (0, 1)
    # The client's next request still finds its prefix, and only it.
    stats = GenerationStats()
    _, cached, _ = engine.start_cache(client + [7], stats)
    assert cached == len(client)


def test_warm_up_prompts_fill_each_whole_step_buffer_and_stay_inside_the_context() -> None:
    base = list(range(10, 23))
    prompts = warm_prompts(base, 8, 8192)
    assert [len(p) for p in prompts] == [k - STEP + 8 for k in range(2 * STEP, WARM_KEYS + 1, STEP)]
    assert all(p == (base * 200)[: len(p)] for p in prompts)  # the base repeated and cut
    short = warm_prompts(base, 8, 600)
    assert short and max(len(p) for p in short) + 2 * 8 + 2 <= 600


@pytest.mark.parametrize("width", [2, 4, 8])
def test_crossing_rows_hold_every_round_start_whose_verify_rows_straddle_two_pass(
    width: int,
) -> None:
    # A verify block starting at R rows: row i reads R + 1 + i keys.
    def mixed(start: int) -> bool:
        return start + 1 <= VECTOR_TWO_PASS_KEYS < start + width

    straddling = {
        r for r in range(VECTOR_TWO_PASS_KEYS - 64, VECTOR_TWO_PASS_KEYS + 64) if mixed(r)
    }
    assert straddling <= set(crossing_rows(width))
    assert len(crossing_rows(width)) <= len(straddling) + 2  # a row of margin each side


def test_crossing_prompts_end_where_the_base_text_ends() -> None:
    base = list(range(10, 23))
    for n in (1, 12, 13, 14, 1005):
        prompt = ending_with(base, n)
        assert len(prompt) == n
        assert prompt == (base * 100)[len(base) * 100 - n :]  # the same text, cut at its start


def test_later_round_starts_are_the_target_cache_rows_each_round_starts_with(pair: Pair) -> None:
    engine = engine_of(pair, 600)
    prompt = pair.tokenizer.encode("rows at every round's start, counted two ways")
    decoder = BatchDecoder(engine)
    sequence = decoder.start(prompt, 40, SamplingParams(), GenerationStats(), ignore_eos=True)
    session = sequence.session
    sizes, rows_after = [], []
    for out in run_alone(decoder, sequence, decoder.width):
        sizes.append(len(out))
        kv = next(c for c in session.cache if hasattr(c, "offset"))  # an attention layer's
        rows_after.append(kv.offset)  # = the next round's start
    assert len(sizes) > 3
    assert later_round_starts(len(prompt), sizes) == rows_after[1:-1]


def test_with_vector_attention_the_warm_up_starts_a_later_round_at_every_crossing_row(
    pair: Pair,
) -> None:
    engine = engine_of(pair, 2048, attention="vector")
    base = pair.tokenizer.encode(TEXT)
    assert warm_crossings(engine, base, WIDTH, time.perf_counter() + 60) == set()
    # Without the room to cross, it says which rows it left unmet.
    engine.context_length = 1024
    assert warm_crossings(engine, base, WIDTH, time.perf_counter() + 60) == set(
        crossing_rows(WIDTH)
    )
