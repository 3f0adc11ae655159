"""The startup warm-up (drafter/warmup.py): which requests it runs, and that it leaves
nothing of them behind for the clients that follow."""

from __future__ import annotations

import pytest

from drafter.attention import STEP, VECTOR_TWO_PASS_KEYS
from drafter.decoding import GenerationStats
from drafter.engine import Engine
from drafter.prompt_cache import PromptCache
from drafter.sampling import SamplingParams
from drafter.warmup import WARM_KEYS, warm_prompts, warm_up
from tests.drafter.conftest import Pair

WIDTH = 4


def test_warm_up_leaves_the_prompt_cache_as_it_found_it(pair: Pair) -> None:
    engine = Engine(
        pair.model,
        pair.tokenizer,
        model_id="tiny",
        context_length=600,  # warm-up requests of 264 tokens only: a quick test
        drafter=pair.drafter,
        block_size=WIDTH,
    )
    cache = engine.prompt_cache = PromptCache(2**30)
    client = pair.tokenizer.encode("a client's prompt, cached before the warm-up")
    list(engine.classic_generate(client, 2, SamplingParams(), ignore_eos=True))
    before = list(cache.entries)
    assert before == [tuple(client)]

    assert warm_up(engine, budget_s=60.0) >= 0
    assert engine.prompt_cache is cache
    assert list(cache.entries) == before
    assert (cache.hits, cache.misses) == (0, 1)
    # The client's next request still finds its prefix, and only it.
    stats = GenerationStats()
    _, cached, _ = engine.start_cache(client + [7], stats)
    assert cached == len(client)


@pytest.mark.parametrize("width", [2, 8])
def test_with_vector_attention_a_warm_up_request_crosses_two_pass_keys_at_each_block_row(
    width: int,
) -> None:
    base = list(range(10, 23))
    prompts = warm_prompts(base, width, "vector", 8192)
    lengths = [len(p) for p in prompts]
    # A prompt of P tokens: its first block's row r reads P + r + 1 keys, so row
    # 1,024 - P is the first past the line. Every row of the block (anchor and width
    # drafts) is that row in some request.
    firsts = {VECTOR_TWO_PASS_KEYS - n for n in lengths}
    assert set(range(width + 1)) <= firsts
    # Each prompt is the base text repeated and cut.
    assert all(p == (base * 200)[: len(p)] for p in prompts)
    # The buffer-size requests come first, as with every other attention.
    steps = warm_prompts(base, width, "exact", 8192)
    assert prompts[: len(steps)] == steps
    assert [len(p) for p in steps] == [k - STEP + 8 for k in range(2 * STEP, WARM_KEYS + 1, STEP)]
    # None of those crosses the line inside its first block: the gap these fill.
    assert all(not 0 <= VECTOR_TWO_PASS_KEYS - len(p) <= width for p in steps)


def test_warm_up_prompts_stay_inside_a_short_context() -> None:
    prompts = warm_prompts(list(range(5, 9)), 8, "vector", 1024)
    assert prompts and max(len(p) for p in prompts) + 2 * 8 + 2 <= 1024
