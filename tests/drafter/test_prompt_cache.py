"""The prompt cache (drafter/prompt_cache.py): a hit gives the output a miss gives, for
classic and speculative decode, on a plain KV target and a Gated DeltaNet hybrid; where
a hit of any prefix would not (`hits_are_exact`), by restoring whole prefill chunks."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
import pytest
from mlx_lm.models.cache import KVCache

from drafter.attention import make_cache
from drafter.decoding import GenerationStats
from drafter.engine import Engine
from drafter.forward import Forward
from drafter.prompt_cache import PROBE_TEXT, PromptCache, hits_are_exact
from drafter.sampling import SamplingParams
from tests.drafter.conftest import ARCHITECTURES, load_pair
from tests.drafter.conftest import Pair as Target

TOKENS = 12
SYSTEM = list(b"You are a careful assistant. Answer briefly.\n")
TURN_1 = SYSTEM + list(b"User: what is a list?\nAssistant:")
TURN_2 = TURN_1 + list(b" an ordered collection.\nUser: and a tuple?\nAssistant:")
OTHER = SYSTEM + list(b"User: name a colour.\nAssistant:")  # shares only SYSTEM


@pytest.fixture(scope="module", params=ARCHITECTURES)
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Target:
    root = tmp_path_factory.mktemp(f"prompt-cache-{request.param}")
    return load_pair(root, request.param, target_seed=4, drafter_seed=5)


def engine(target: Target, speculative: bool, cache_bytes: int | None, step: int = 1) -> Engine:
    engine = Engine(
        target.model,
        target.tokenizer,
        model_id="tiny",
        context_length=2048,
        drafter=target.drafter if speculative else None,
        block_size=4 if speculative else None,
    )
    engine.prompt_cache = None if cache_bytes is None else PromptCache(cache_bytes, step)
    return engine


def stored(engine: Engine) -> PromptCache:
    """The engine's prompt cache (these engines are made with one)."""
    assert engine.prompt_cache is not None
    return engine.prompt_cache


def run(engine: Engine, prompt: list[int], stats: GenerationStats | None = None) -> list[int]:
    rounds = engine.generate(prompt, TOKENS, SamplingParams(), stats or GenerationStats())
    return [t.id for step in rounds for t in step]


@pytest.mark.parametrize("speculative", [False, True], ids=["classic", "speculative"])
def test_a_later_turn_after_a_hit_equals_the_uncached_output(
    target: Target, speculative: bool
) -> None:
    cached = engine(target, speculative, 1 << 30)
    run(cached, TURN_1)
    stats = GenerationStats()
    hit = run(cached, TURN_2, stats)
    assert stats.cached_tokens == len(TURN_1)
    assert stored(cached).hits == 1 and stored(cached).misses == 1
    assert hit == run(engine(target, speculative, None), TURN_2)


@pytest.mark.parametrize("speculative", [False, True], ids=["classic", "speculative"])
def test_the_same_prompt_again_reuses_all_but_its_last_token(
    target: Target, speculative: bool
) -> None:
    cached = engine(target, speculative, 1 << 30)
    first = run(cached, TURN_1)
    stats = GenerationStats()
    again = run(cached, TURN_1, stats)
    trimmable = target.arch == "qwen3"  # a recurrent state cannot step back one token
    assert stats.cached_tokens == (len(TURN_1) - 1 if trimmable else 0)
    assert again == first


@pytest.mark.parametrize("speculative", [False, True], ids=["classic", "speculative"])
def test_a_prefix_shared_in_the_middle_of_a_prompt_is_a_hit_where_the_cache_trims(
    target: Target, speculative: bool
) -> None:
    cached = engine(target, speculative, 1 << 30)
    run(cached, TURN_1)
    stats = GenerationStats()
    out = run(cached, OTHER, stats)
    shared = len(SYSTEM) + len(b"User: ")
    assert stats.cached_tokens == (shared if target.arch == "qwen3" else 0)
    assert out == run(engine(target, speculative, None), OTHER)


def test_eviction_keeps_the_cache_within_its_budget_least_recently_used_first(
    target: Target,
) -> None:
    probe = engine(target, False, 1 << 30)
    run(probe, TURN_1)
    one_entry = stored(probe).nbytes
    cached = engine(target, False, int(one_entry * 1.5))
    run(cached, TURN_1)
    run(cached, OTHER)  # does not fit beside TURN_1: TURN_1 goes
    assert [len(k) for k in stored(cached).entries] == [len(OTHER)]
    assert stored(cached).nbytes <= stored(cached).max_bytes
    tiny = engine(target, False, one_entry // 4)
    run(tiny, TURN_1)
    assert not stored(tiny).entries  # an entry larger than the budget is not kept


@pytest.mark.parametrize("speculative", [False, True], ids=["classic", "speculative"])
def test_a_request_abandoned_after_its_prefill_leaves_a_whole_entry(
    target: Target, speculative: bool
) -> None:
    """A client that goes away stops the generator between rounds; what was stored is
    the state of the whole prompt, so the next request is still exact."""
    cached = engine(target, speculative, 1 << 30)
    rounds = cached.generate(TURN_1, TOKENS, SamplingParams(), GenerationStats())
    next(rounds)
    rounds.close()
    assert [len(k) for k in stored(cached).entries] == [len(TURN_1)]
    assert run(cached, TURN_2) == run(engine(target, speculative, None), TURN_2)


def test_an_entry_is_not_changed_by_the_decoding_that_follows(target: Target) -> None:
    cached = engine(target, False, 1 << 30)
    run(cached, TURN_1)
    (entry,) = stored(cached).entries.values()
    before = [a for c in entry.cache for a in c.state if a is not None and hasattr(a, "sum")]
    snapshot = [a.sum().item() for a in before]
    run(cached, TURN_2)
    assert [a.sum().item() for a in before] == snapshot


class StopMidPrefill(Exception):
    pass


@pytest.mark.parametrize("speculative", [False, True], ids=["classic", "speculative"])
def test_a_prefill_interrupted_between_chunks_stores_nothing(
    target: Target, speculative: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prefill runs in chunks; one that stops after its first chunk (an error, a
    shutdown) leaves no entry, and the next request is exact."""
    import drafter.decoding

    monkeypatch.setattr(drafter.decoding, "PREFILL_STEP", 16)
    monkeypatch.setattr(drafter.decoding, "CPU_PREFILL_STEP", 16)
    cached = engine(target, speculative, 1 << 30)
    calls = {"n": 0}
    real_call = type(target.model).__call__

    def failing_call(model: Any, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise StopMidPrefill
        return real_call(model, *args, **kwargs)

    monkeypatch.setattr(type(target.model), "__call__", failing_call)
    with pytest.raises(StopMidPrefill):
        run(cached, TURN_1)
    monkeypatch.setattr(type(target.model), "__call__", real_call)
    assert calls["n"] == 2 and not stored(cached).entries
    assert run(cached, TURN_1) == run(engine(target, speculative, None), TURN_1)


class ForwardMean(nn.Module):
    """A one-layer model whose rows each add the mean of their forward's rows: its
    cached state depends on how a prompt is split into forwards, as a GPU's bf16
    rounding does (docs/benchmark_results/h200-served-split.md)."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, 8)

    def __call__(self, tokens: mx.array, cache: list[KVCache]) -> mx.array:
        x = self.embed(tokens)
        x = x + x.mean(axis=1, keepdims=True)
        cache[0].update_and_fetch(x[:, None], x[:, None])
        return self.embed.as_linear(x)


def test_hits_are_exact_where_two_part_prefills_equal_one_forward(target: Target) -> None:
    prompt = target.tokenizer.encode(PROBE_TEXT)
    model = target.model
    assert hits_are_exact(Forward(model), lambda: make_cache(model, "exact"), prompt)
    mean = ForwardMean(vocab=257)
    assert not hits_are_exact(Forward(mean), lambda: [KVCache()], prompt)


def test_a_cache_of_whole_chunks_restores_whole_chunks_and_changes_no_output(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the prefill chunk cut to 16 rows, a hit restores a multiple of 16 rows: rows
    a cold prefill computes by the same forwards."""
    import drafter.decoding

    monkeypatch.setattr(drafter.decoding, "PREFILL_STEP", 16)
    monkeypatch.setattr(drafter.decoding, "CPU_PREFILL_STEP", 16)
    cached = engine(target, False, 1 << 30, step=16)
    run(cached, TURN_1)
    stats = GenerationStats()
    hit = run(cached, TURN_2, stats)
    whole = len(TURN_1) - len(TURN_1) % 16
    trimmable = target.arch == "qwen3" or whole == len(TURN_1)
    assert stats.cached_tokens == (whole if trimmable else 0)
    assert hit == run(engine(target, False, None), TURN_2)


def test_a_prompt_shorter_than_the_step_is_not_stored(target: Target) -> None:
    """Nothing of it could be restored (a hit restores whole steps): storing it would
    only cost a host sync and a copy per request."""
    cached = engine(target, False, 1 << 30, step=len(TURN_1) + 1)
    run(cached, TURN_1)
    assert cached.prompt_cache is not None and not cached.prompt_cache.entries
    run(cached, TURN_1 + TURN_1)
    assert len(cached.prompt_cache.entries) == 1
