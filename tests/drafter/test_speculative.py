"""The speculative round loop: greedy output and target cache equal classic decode's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm.models.cache import make_prompt_cache
from scipy.stats import chisquare

from drafter import polyexp
from drafter.batch import BatchDecoder, run_alone
from drafter.decoding import DraftScores, GenerationStats
from drafter.dflash import DFlashDrafter
from drafter.engine import Engine
from drafter.forward import Forward
from drafter.sampling import SamplingParams, sampling_logprobs, token_logprobs
from drafter.speculative import Session
from tests.drafter.conftest import Pair, engine_on

WIDTHS = [2, 3, 4, 5, 8, 16]
PROMPT = list(b"The quick brown fox")
TOKENS = 20


@dataclass
class ForcedDrafter:
    """Test double around the real drafter (which still runs, so its context
    plumbing is exercised): its first `agree` drafts are the target's greedy
    continuation (`reference`, from a classic run), every later draft differs."""

    inner: DFlashDrafter
    prompt_length: int
    reference: list[int]
    agree: int
    contexts: list[mx.array] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def ingest(self, features: mx.array, cache: list) -> None:
        self.inner.ingest(features, cache)
        self.contexts.append(features)

    def draft_scores(self, anchor: int, features: mx.array, cache: list, width: int) -> DraftScores:
        real = self.inner.draft_scores(anchor, features, cache, width).logits()
        mx.eval(real)
        self.contexts.append(features)
        position = cache[0].offset - self.prompt_length  # the anchor's index in the output
        assert self.reference[position] == anchor
        vocab = real.shape[-1]
        wanted = []
        for j in range(1, width):
            token = self.reference[position + j] if position + j < len(self.reference) else 0
            wanted.append(token if j <= self.agree else (token + 1) % vocab)
        return DraftScores(mx.where(mx.array(wanted)[:, None] == mx.arange(vocab), 0.0, -1e4))


@pytest.fixture(autouse=True)
def polyexp_at_any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny pair's queries have few scores; let polyexp serve them all, so the
    polyexp cases below run its attention, not MLX's."""
    monkeypatch.setattr(polyexp, "MIN_SCORES", 0)


def engine_for(
    pair: Pair,
    drafter: Any = None,
    width: int | None = None,
    attention: str = "exact",
    linear: str | None = None,
    activation: str | None = None,
) -> Engine:
    """`engine_on` with exact attention unless asked."""
    return engine_on(
        pair, drafter, width, attention=attention, linear=linear, activation=activation
    )


def run(engine: Engine, max_tokens: int, params: SamplingParams | None = None) -> list[int]:
    params = params or SamplingParams()
    return [t.id for step in engine.generate(PROMPT, max_tokens, params) for t in step]


def classic(
    pair: Pair, max_tokens: int, params: SamplingParams | None = None, attention: str = "exact"
) -> list[int]:
    return run(engine_for(pair, attention=attention), max_tokens, params)


def forced(pair: Pair, reference: list[int], agree: int) -> ForcedDrafter:
    return ForcedDrafter(pair.drafter, len(PROMPT), reference, agree)


def live_arrays(entry: Any) -> list[mx.array]:
    """The cache contents later forwards read: KV rows up to the offset, or the
    recurrent (conv, state) arrays."""
    if hasattr(entry, "keys"):
        return [entry.keys[..., : entry.offset, :], entry.values[..., : entry.offset, :]]
    return list(entry.cache)


def assert_same_cache(spec: list, ref: list) -> None:
    for a, b in zip(spec, ref, strict=True):
        assert getattr(a, "offset", None) == getattr(b, "offset", None)
        for x, y in zip(live_arrays(a), live_arrays(b), strict=True):
            assert x.shape == y.shape
            assert mx.allclose(x, y, atol=1e-4, rtol=1e-4).item()


@pytest.mark.parametrize("attention", ["exact", "vector", "polyexp"])
@pytest.mark.parametrize("width", WIDTHS)
def test_greedy_equals_classic_for_every_acceptance_length(
    pair: Pair, width: int, attention: str
) -> None:
    """For every k, drafts agree for k positions then disagree: every rollback
    length is exercised, and after every round the target cache equals the cache
    classic decode has after the same tokens. With vector attention (the
    CUDA default) it attends in chunks of at most 3 rows; with polyexp (the CPU default)
    classic decode takes it too, so the reference is classic under the same mode."""
    reference = classic(pair, TOKENS + width, attention=attention)
    for agree in range(width):
        decoder = BatchDecoder(engine_for(pair, forced(pair, reference, agree), width, attention))
        sequence = decoder.start(PROMPT, TOKENS, SamplingParams(), GenerationStats())
        session = sequence.session
        ref_cache = make_prompt_cache(pair.model)
        pair.model(mx.array(PROMPT)[None], cache=ref_cache)
        out: list[int] = []
        for step in run_alone(decoder, sequence, width):
            for token in [t.id for t in step]:
                if out:
                    pair.model(mx.array([[out[-1]]]), cache=ref_cache)
                out.append(token)
            assert out == reference[: len(out)], f"width {width}, agree {agree}"
            assert_same_cache(session.cache, ref_cache)
        assert out == reference[:TOKENS]


def test_a_drafter_with_a_draft_vocabulary_still_equals_classic(pair: Pair) -> None:
    vocab = pair.model.model.embed_tokens.weight.shape[0]
    drafter = DFlashDrafter(
        pair.drafter.model,
        pair.drafter.args,
        pair.model,
        pair.drafter.path,
        list(range(0, vocab, 2)),
    )
    for width in (3, 8):
        assert run(engine_for(pair, drafter, width), TOKENS) == classic(pair, TOKENS)


@pytest.mark.parametrize(
    ("attention", "linear"),
    [
        ("exact", "columns"),
        ("exact", "rowwise"),
        ("vector", "rowwise"),
        ("polyexp", "padded"),
        ("polyexp", "columns"),
    ],
    ids=["exact", "cuda-cudnn-layout", "cuda-layout", "amd-mkl-layout", "cpu-layout"],
)
@pytest.mark.parametrize("width", [4, 16])
def test_real_dflash_drafter_end_to_end_equals_classic(
    pair: Pair, width: int, attention: str, linear: str
) -> None:
    """cuda-layout: vector attention and rowwise products, what CUDA serves with;
    amd-mkl-layout: polyexp attention and padded one-row products, what an AMD CPU under
    MKL serves with; cpu-layout: polyexp and column products, other CPUs."""
    speculative = run(engine_for(pair, pair.drafter, width, attention, linear), TOKENS)
    assert speculative == classic(pair, TOKENS, attention=attention)


@pytest.mark.parametrize("width", [4, 16])
def test_with_polyexps_swiglu_speculation_equals_classic_under_it(pair: Pair, width: int) -> None:
    """The activation is elementwise, so verify rows and classic steps keep equal bits."""
    speculative = run(engine_for(pair, pair.drafter, width, activation="polyexp"), TOKENS)
    assert speculative == run(engine_for(pair, activation="polyexp"), TOKENS)


def test_one_engine_serves_any_width_per_call_and_classic_with_width_none(pair: Pair) -> None:
    engine = engine_for(pair, pair.drafter, 4)
    reference = classic(pair, TOKENS)
    for width in (None, 2, 4, 16):
        stats = GenerationStats()
        steps = engine.generate(PROMPT, TOKENS, SamplingParams(), stats, width=width)
        assert [t.id for step in steps for t in step] == reference
        if width is None:
            assert stats.rounds == 0
        else:
            assert stats.rounds > 0 and stats.drafted == stats.rounds * (width - 1)
    with pytest.raises(ValueError, match="above the drafter"):
        next(engine.generate(PROMPT, TOKENS, SamplingParams(), width=pair.drafter.max_width + 1))


def test_drafter_context_is_the_targets_features_of_every_position(pair: Pair) -> None:
    """Prompt features, then each round's anchor + accepted rows, at their positions."""
    reference = classic(pair, TOKENS + 4)
    drafter = forced(pair, reference, agree=2)
    out = run(engine_for(pair, drafter, 4), TOKENS)
    forward = Forward(pair.model, pair.drafter.target_layer_ids)
    expected = forward(mx.array(PROMPT + out)[None], None, taps=True)[1]
    assert expected is not None
    given = mx.concatenate(drafter.contexts, axis=1)
    assert given.shape[1] == len(PROMPT) + len(out) - 1 - (len(out) - 1) % 3
    assert mx.allclose(given, expected[:, : given.shape[1]], atol=1e-4, rtol=1e-4).item()


@pytest.mark.parametrize("max_tokens", range(1, 11))
def test_max_tokens_inside_an_accepted_block_ends_like_classic(pair: Pair, max_tokens: int) -> None:
    reference = classic(pair, TOKENS)
    engine = engine_for(pair, forced(pair, reference, agree=7), 8)
    assert run(engine, max_tokens) == reference[:max_tokens]


def test_eos_inside_an_accepted_block_ends_like_classic(pair: Pair) -> None:
    reference = classic(pair, TOKENS)
    eos = reference[6]
    saved = pair.tokenizer.eos_token_ids
    pair.tokenizer.eos_token_ids = {eos}
    try:
        expected = classic(pair, TOKENS)
        assert expected == reference[: reference.index(eos) + 1]
        for agree in (2, 7):
            assert run(engine_for(pair, forced(pair, reference, agree), 8), TOKENS) == expected
    finally:
        pair.tokenizer.eos_token_ids = saved


def test_caller_stopping_mid_block_sees_the_classic_prefix(pair: Pair) -> None:
    reference = classic(pair, TOKENS)
    seen: list[int] = []
    engine = engine_for(pair, forced(pair, reference, agree=7), 8)
    for step in engine.generate(PROMPT, TOKENS, SamplingParams()):
        seen.extend(t.id for t in step)
        if len(seen) >= 5:
            break
    assert seen[:5] == reference[:5]


def test_penalties_and_logit_bias_choose_like_classic(pair: Pair) -> None:
    params = SamplingParams(
        presence_penalty=0.8, frequency_penalty=0.5, logit_bias={32: 1.5, 101: -2.0}
    )
    reference = classic(pair, TOKENS + 5, params)
    for agree in range(5):
        engine = engine_for(pair, forced(pair, reference, agree), 5)
        assert run(engine, TOKENS, params) == reference[:TOKENS]


def test_reported_logprobs_match_classic(pair: Pair) -> None:
    params = SamplingParams(logprobs=3)
    reference = classic(pair, TOKENS)
    tokens_classic = [t for s in engine_for(pair).generate(PROMPT, TOKENS, params) for t in s]
    engine = engine_for(pair, forced(pair, reference, agree=3), 5)
    tokens_spec = [t for s in engine.generate(PROMPT, TOKENS, params) for t in s]
    assert [t.id for t in tokens_spec] == [t.id for t in tokens_classic]
    for a, b in zip(tokens_spec, tokens_classic, strict=True):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
        assert a.top_logprobs is not None and b.top_logprobs is not None
        assert list(a.top_logprobs) == list(b.top_logprobs)


@pytest.mark.parametrize(
    ("tokens", "accepted", "by_position"),
    [
        # 1 prefill token, then 5 rounds of 2 accepted drafts + 1 target token.
        (16, 10, [5, 5, 0, 0]),
        # The last round is cut to 2 of its 3 tokens: both were accepted drafts, but a
        # round's last emitted token counts as its own, so acceptance = tokens a round.
        (15, 9, [5, 4, 0, 0]),
    ],
)
def test_stats_count_rounds_drafts_and_the_accepted_drafts_emitted(
    pair: Pair, tokens: int, accepted: int, by_position: list[int]
) -> None:
    reference = classic(pair, 40)
    stats = GenerationStats()
    engine = engine_for(pair, forced(pair, reference, agree=2), 5)
    out = [t.id for s in engine.generate(PROMPT, tokens, SamplingParams(), stats) for t in s]
    assert len(out) == tokens
    assert (stats.block_size, stats.rounds, stats.drafted, stats.accepted) == (5, 5, 20, accepted)
    assert stats.accepted_per_position == by_position
    assert stats.acceptance_length == pytest.approx((tokens - 1) / 5)


def test_sampling_with_a_seed_is_reproducible(pair: Pair) -> None:
    params = SamplingParams(temperature=0.8, top_p=0.9, seed=7)
    engine = engine_for(pair, pair.drafter, 4)
    first = run(engine, TOKENS, params)
    assert run(engine, TOKENS, params) == first
    assert len(first) == TOKENS or first[-1] in pair.tokenizer.eos_token_ids


@dataclass
class TargetDrafter:
    """Test double proposing from the target's own distribution after the anchor
    (q = p on the first draft, so it is always accepted); later drafts are masked
    rows of the real drafter."""

    inner: DFlashDrafter
    model: Any
    prefix: list[int]
    params: SamplingParams

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def draft_scores(self, anchor: int, features: mx.array, cache: list, width: int) -> DraftScores:
        real = self.inner.draft_scores(anchor, features, cache, width).logits()
        own = self.model(mx.array(self.prefix + [anchor])[None])[0, -1]
        return DraftScores(mx.concatenate([own[None], real[1:]]))


def sampling_dist(model: Any, tokens: list[int], params: SamplingParams) -> mx.array:
    logits = model(mx.array(tokens)[None])[0, -1]
    return mx.exp(sampling_logprobs(token_logprobs(logits, None, params), params))


@pytest.mark.parametrize("pair", ["qwen3"], indirect=True)  # the sampling math is arch-free
@pytest.mark.parametrize("drafter_kind", ["real", "target"])
def test_sampled_tokens_follow_the_target_distribution(pair: Pair, drafter_kind: str) -> None:
    """Chi-square of 300 seeded runs over the exact joint distribution of the first two
    tokens (cells with expected count < 5 pooled), significance 1e-3. The real random
    drafter exercises rejection + residual draws, the target-distribution one acceptance."""
    params = SamplingParams(temperature=1.0, top_p=0.5)
    first = sampling_dist(pair.model, PROMPT, params)
    joint: dict[tuple[int, int], float] = {}
    for t1 in [i for i, p in enumerate(first.tolist()) if p > 0]:
        second = sampling_dist(pair.model, PROMPT + [t1], params).tolist()
        for t2, p in enumerate(second):
            if p > 0:
                joint[(t1, t2)] = first[t1].item() * p
    drafter: Any = pair.drafter
    if drafter_kind == "target":
        drafter = TargetDrafter(pair.drafter, pair.model, PROMPT, params)
    engine = engine_for(pair, drafter, 4)
    runs = 300
    counts: dict[tuple[int, int], int] = {}
    for seed in range(runs):
        first_token, second_token = run(
            engine, 2, SamplingParams(temperature=1.0, top_p=0.5, seed=seed)
        )
        cell = (first_token, second_token)
        counts[cell] = counts.get(cell, 0) + 1
    assert set(counts) <= set(joint)
    big = [cell for cell, p in joint.items() if p * runs >= 5]
    observed = [counts.get(cell, 0) for cell in big] + [runs - sum(counts.get(c, 0) for c in big)]
    expected = [joint[cell] * runs for cell in big] + [runs * (1 - sum(joint[c] for c in big))]
    assert chisquare(observed, expected).pvalue > 1e-3


@pytest.mark.parametrize("pair", ["qwen3"], indirect=True)
def test_prompt_longer_than_one_prefill_chunk_gives_features_for_every_row(pair: Pair) -> None:
    prompt = list(range(256)) * 9  # 2304 tokens: two prefill chunks
    params = SamplingParams()
    reference = [t.id for s in engine_for(pair).generate(prompt, 12, params) for t in s]
    drafter = ForcedDrafter(pair.drafter, len(prompt), reference, agree=2)
    out = [t.id for s in engine_for(pair, drafter, 4).generate(prompt, 8, params) for t in s]
    assert out == reference[:8]
    assert drafter.contexts[0].shape[1] == len(prompt)


def buffer_rows(session: Session) -> list[int]:
    caches = session.cache + session.draft_cache
    return [c.keys.shape[2] for c in caches if getattr(c, "keys", None) is not None]


@pytest.mark.parametrize("pair", ["qwen3"], indirect=True)
@pytest.mark.parametrize("reserve_kv", [True, False])
def test_no_round_grows_a_kv_buffer_once_the_request_is_reserved(
    pair: Pair, reserve_kv: bool
) -> None:
    """A request's KV buffers are sized at its prefill, so no round pays for a growth
    (a new buffer and a copy of every layer's rows); off, mlx-lm grows them by 256 rows
    mid-request. Greedy output is the same either way, and equals classic decode's."""
    engine = engine_for(pair, pair.drafter, 4)
    engine.reserve_kv = reserve_kv
    prompt = PROMPT * 12  # 228 tokens: the 256-row step is crossed mid-request
    decoder = BatchDecoder(engine)
    sequence = decoder.start(prompt, 100, SamplingParams(), GenerationStats(), ignore_eos=True)
    session = sequence.session
    rows, tokens = [], []
    for step in run_alone(decoder, sequence, 4):
        rows.append(buffer_rows(session))
        tokens += [t.id for t in step]
    grew = sum(after != before for before, after in zip(rows[1:], rows[2:], strict=False))
    assert (grew == 0) == reserve_kv
    if reserve_kv:
        assert min(rows[1]) >= len(prompt) + 100  # the drafter's since its first block
    plain = engine_for(pair)
    plain.reserve_kv = reserve_kv
    reference = [t.id for s in plain.generate(prompt, 100, SamplingParams(), None, True) for t in s]
    assert tokens == reference


def test_prefill_puts_the_prompt_into_the_drafters_context(pair: Pair) -> None:
    """The prompt's context rows are projected at the prefill, so the first round takes
    in no new rows and costs what later rounds cost; the drafts are unchanged."""
    engine = engine_for(pair, pair.drafter, 4)
    decoder = BatchDecoder(engine)
    sequence = decoder.start(PROMPT, TOKENS, SamplingParams(), GenerationStats(), ignore_eos=True)
    session = sequence.session
    steps = run_alone(decoder, sequence, 4)
    next(steps)  # the prefill's token
    assert [c.offset for c in session.draft_cache] == [len(PROMPT)] * len(session.draft_cache)
    context = session.take_context()
    assert context is not None and context.shape[1] == 0
