"""Batched rounds: every request's output is the one it gets alone, however the batch
around it changes."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest

from drafter.batch import BatchDecoder, Sequence
from drafter.decoding import GenerationStats
from drafter.engine import Engine
from drafter.sampling import SamplingParams
from tests.drafter.conftest import Pair, engine_on

WIDTH = 4


def engine(
    pair: Pair, speculative: bool, attention: str | None = None, linear: str | None = None
) -> Engine:
    """The device's layout unless asked; each engine sets it on the shared model."""
    drafter, width = (pair.drafter, WIDTH) if speculative else (None, None)
    return engine_on(pair, drafter, width, attention=attention, linear=linear)


@dataclass
class Request:
    prompt: list[int]
    max_tokens: int
    params: SamplingParams
    joins_at: int  # the step it is started at
    cancel_at: int | None = None


def requests(count: int, seed: int = 0, params: SamplingParams | None = None) -> list[Request]:
    """Prompts of 3 to 60 tokens, 6 to 30 new tokens, joining every other step."""
    rng = random.Random(seed)
    return [
        Request(
            [rng.randrange(1, 250) for _ in range(rng.randrange(3, 60))],
            rng.randrange(6, 30),
            params or SamplingParams(),
            joins_at=2 * i,
        )
        for i in range(count)
    ]


def solo(eng: Engine, request: Request) -> list[int]:
    rounds = eng.generate(request.prompt, request.max_tokens, request.params, ignore_eos=True)
    return [token.id for tokens in rounds for token in tokens]


def batched(
    eng: Engine, reqs: list[Request], widths: list[int] | None = None
) -> dict[int, list[int]]:
    """Run the requests through one BatchDecoder as a scheduler would: joins at their
    step, one prefill chunk each per step, one batched round over the decoding ones
    (at widths[step % len(widths)]), leaves when done or cancelled."""
    decoder = BatchDecoder(eng)
    outputs: dict[int, list[int]] = {}
    live: dict[int, Sequence] = {}
    step = 0
    while len(outputs) < len(reqs) or live:
        for i, req in enumerate(reqs):
            if req.joins_at == step:
                stats = GenerationStats()
                live[i] = decoder.start(req.prompt, req.max_tokens, req.params, stats, True)
                outputs[i] = []
            if req.cancel_at == step and i in live:
                del live[i]
        for i, sequence in live.items():
            if sequence.prefill is not None:
                outputs[i] += [token.id for token in decoder.advance_prefill(sequence)]
        decoding = {i: s for i, s in live.items() if s.decoding}
        width = decoder.width if widths is None else widths[step % len(widths)]
        decoder.step(list(decoding.values()), width)
        for i, sequence in decoding.items():
            outputs[i] += [token.id for token in sequence.tokens]
        live = {i: s for i, s in live.items() if not s.done}
        step += 1
    return outputs


def assert_each_equals_solo(
    eng: Engine, reqs: list[Request], widths: list[int] | None = None
) -> None:
    outputs = batched(eng, reqs, widths)
    for i, req in enumerate(reqs):
        assert outputs[i] == solo(eng, req), f"request {i} of {len(reqs)}"


@pytest.mark.parametrize("speculative", [False, True], ids=["classic", "speculative"])
@pytest.mark.parametrize("count", [1, 2, 8])
def test_each_greedy_request_in_a_batch_equals_its_solo_output(
    pair: Pair, speculative: bool, count: int
) -> None:
    assert_each_equals_solo(engine(pair, speculative), requests(count, seed=count))


@pytest.mark.parametrize("count", [2, 8])
def test_in_cudas_layout_each_request_in_a_batch_equals_its_solo_output(
    pair: Pair, count: int
) -> None:
    """Vector attention and rowwise products, as CUDA serves: a batch of up to 16 rows
    runs its products rowwise, its q/k/v handed to mlx-lm's reshape unreshaped."""
    eng = engine(pair, True, attention="vector", linear="rowwise")
    assert_each_equals_solo(eng, requests(count, seed=10 + count))


def test_a_width_changing_every_step_leaves_greedy_output_unchanged(pair: Pair) -> None:
    assert_each_equals_solo(engine(pair, True), requests(6, seed=11), widths=[1, 2, 4, 3])


def test_a_cancelled_request_leaving_mid_flight_does_not_disturb_the_others(pair: Pair) -> None:
    eng = engine(pair, True)
    reqs = requests(5, seed=5)
    reqs[1].cancel_at = 6
    outputs = batched(eng, reqs)
    reference = {i: solo(eng, req) for i, req in enumerate(reqs)}
    for i in (0, 2, 3, 4):
        assert outputs[i] == reference[i], f"request {i}"
    assert reference[1][: len(outputs[1])] == outputs[1]
    assert len(outputs[1]) < len(reference[1])


@pytest.mark.parametrize("speculative", [False, True], ids=["classic", "speculative"])
def test_seeded_sampling_in_a_batch_keeps_each_requests_stream(
    pair: Pair, speculative: bool
) -> None:
    reqs = requests(4, seed=7)
    for i, req in enumerate(reqs):
        req.params = SamplingParams(temperature=0.8, seed=100 + i)
    assert_each_equals_solo(engine(pair, speculative), reqs)


def prefilled(decoder: BatchDecoder, reqs: list[Request]) -> tuple[list[Sequence], list[list[Any]]]:
    """The requests started and prefilled; each one's tokens so far (its first)."""
    sequences = [
        decoder.start(r.prompt, r.max_tokens, r.params, GenerationStats(), True) for r in reqs
    ]
    got: list[list[Any]] = [[] for _ in reqs]
    for i, sequence in enumerate(sequences):
        while sequence.prefill is not None:
            got[i] += decoder.advance_prefill(sequence)
    return sequences, got


def assert_tokens_and_logprobs_equal_solo(
    eng: Engine, reqs: list[Request], got: list[list[Any]]
) -> None:
    for i, req in enumerate(reqs):
        rounds = eng.generate(req.prompt, req.max_tokens, req.params, ignore_eos=True)
        alone = [token for tokens in rounds for token in tokens]
        assert [t.id for t in got[i]] == [t.id for t in alone]
        for mine, theirs in zip(got[i], alone, strict=True):
            assert mine.logprob == pytest.approx(theirs.logprob, abs=1e-5)
            assert mine.top_logprobs == pytest.approx(theirs.top_logprobs, abs=1e-5)


def test_penalties_and_logprobs_in_a_batch_equal_solo(pair: Pair) -> None:
    eng = engine(pair, True)
    reqs = requests(3, seed=9)
    for req in reqs:
        req.params = SamplingParams(presence_penalty=0.6, frequency_penalty=0.4, logprobs=2)
    decoder = BatchDecoder(eng)
    sequences, got = prefilled(decoder, reqs)
    while any(not s.done for s in sequences):
        decoding = [s for s in sequences if not s.done]
        decoder.step(decoding, WIDTH)
        for i, sequence in enumerate(sequences):
            if sequence in decoding:
                got[i] += sequence.tokens
    assert_tokens_and_logprobs_equal_solo(eng, reqs, got)


def test_stats_count_the_rounds_that_drafted(pair: Pair) -> None:
    eng = engine(pair, True)
    reqs = requests(3, seed=3)
    decoder = BatchDecoder(eng)
    stats = [GenerationStats() for _ in reqs]
    sequences = [
        decoder.start(r.prompt, 40, r.params, s, True) for r, s in zip(reqs, stats, strict=True)
    ]
    for sequence in sequences:
        while sequence.prefill is not None:
            decoder.advance_prefill(sequence)
    assert decoder.step(sequences, 1) == 1  # a classic step: nothing drafted
    assert all(s.rounds == 0 for s in stats)
    # Attention-only caches pipeline a batch's classic steps: the step in flight is
    # taken (a classic one) before the batch drafts.
    assert decoder.state is not None
    if decoder.state.by_length:
        assert decoder.step(sequences, WIDTH) == 1
        assert all(s.rounds == 0 for s in stats)
    assert decoder.step(sequences, WIDTH) == WIDTH
    assert all(s.rounds == 1 and s.drafted == WIDTH - 1 for s in stats)


@pytest.mark.parametrize("reporting", [3, 1, 0], ids=["all-logprobs", "one", "none"])
def test_a_batchs_classic_steps_are_pipelined_and_report_solo_logprobs(
    pair: Pair, reporting: int
) -> None:
    """While a batch and its width hold, each classic step queues the next one's forward
    before reading its own; tokens and logprobs stay each request's solo ones, whether
    the batch chooses request by request or (no logprobs anywhere) in one argmax."""
    eng = engine(pair, False)
    reqs = requests(3, seed=19)
    for i, req in enumerate(reqs):
        req.params = SamplingParams(logprobs=2) if i < reporting else SamplingParams()
        req.max_tokens = 12
    decoder = BatchDecoder(eng)
    sequences, got = prefilled(decoder, reqs)
    pipelined = 0
    while not sequences[0].done:
        decoder.step(sequences, 1)
        pipelined += decoder.queued is not None
        for i, sequence in enumerate(sequences):
            got[i] += sequence.tokens
    decoder.release()
    by_length = all(type(c).__name__ != "ArraysCache" for c in sequences[0].session.cache)
    assert pipelined == (10 if by_length else 0)  # all but the last of 11 steps
    assert_tokens_and_logprobs_equal_solo(eng, reqs, got)


@pytest.mark.parametrize("speculative", [False, True], ids=["classic", "speculative"])
def test_requests_joining_and_leaving_a_batch_do_not_stall_its_pipeline(
    pair: Pair, speculative: bool
) -> None:
    """The step in which a request emits its last token queues the next one for the
    others, and a request new to a step is fed its first token in the next queued one:
    while two or more decode, every classic step but the last is pipelined, and every
    output equals its solo output."""
    eng = engine(pair, speculative)
    reqs = requests(4, seed=23)
    for req, max_tokens in zip(reqs, (5, 9, 14, 11), strict=True):
        req.max_tokens = max_tokens
    decoder = BatchDecoder(eng)
    sequences, got = prefilled(decoder, reqs[:3])
    pipelined = []
    for step in range(30):
        if step == 3:  # a fourth request joins the batch in flight
            late, first = prefilled(decoder, reqs[3:])
            sequences, got = sequences + late, got + first
        decoding = [s for s in sequences if not s.done]
        if len(decoding) < 2:
            break
        decoder.step(decoding, 1)
        pipelined.append(decoder.queued is not None)
        for i, sequence in enumerate(sequences):
            if sequence in decoding:
                got[i] += sequence.tokens
    by_length = all(type(c).__name__ != "ArraysCache" for c in sequences[0].session.cache)
    assert pipelined == [by_length] * (len(pipelined) - 1) + [False]
    for sequence in sequences:  # the drafter's context: one row per token fed since the prompt
        rows = sum(piece.shape[1] for piece in sequence.session.context or [])
        assert rows == (sequence.emitted - 1 if speculative else 0)
    for i, sequence in enumerate(sequences):  # the last one ends alone
        while not sequence.done:
            decoder.step([sequence], 1)
            got[i] += sequence.tokens
    assert_tokens_and_logprobs_equal_solo(eng, reqs, got)


@pytest.mark.parametrize("speculative", [False, True], ids=["classic", "speculative"])
def test_a_pipelined_lone_request_joined_by_another_keeps_an_exact_cache(
    pair: Pair, speculative: bool
) -> None:
    """Alone, classic steps are pipelined (the next token is fed before this one is
    read), in a speculative server too; when a second request joins, that feed is
    taken back out."""
    eng = engine(pair, speculative)
    first, second = requests(2, seed=13)
    decoder = BatchDecoder(eng)
    lone = decoder.start(first.prompt, 40, first.params, GenerationStats(), True)
    while lone.prefill is not None:
        decoder.advance_prefill(lone)
    for _ in range(3):
        decoder.step([lone], 1)
        assert lone.queued is not None
    other = decoder.start(second.prompt, 40, second.params, GenerationStats(), True)
    while other.prefill is not None:
        decoder.advance_prefill(other)
    decoder.step([lone, other], 1)
    decoder.release()
    assert lone.queued is None
    attention = [c for c in lone.session.cache if hasattr(c, "offset")]
    fed = len(first.prompt) + lone.emitted - 1  # every emitted token but the last
    assert attention and all(c.offset == fed for c in attention)


def started_alone(
    pair: Pair, seed: int
) -> tuple[Engine, Request, BatchDecoder, Sequence, list[int]]:
    """A speculative engine's lone request of 40 tokens, its prefill done: the engine,
    the request, its decoder and sequence, and the token ids emitted so far."""
    eng = engine(pair, True)
    request = requests(1, seed=seed)[0]
    decoder = BatchDecoder(eng)
    lone = decoder.start(request.prompt, 40, request.params, GenerationStats(), True)
    out: list[int] = []
    while lone.prefill is not None:
        out += [token.id for token in decoder.advance_prefill(lone)]
    return eng, request, decoder, lone, out


@pytest.mark.parametrize("widths", [[1, 1, 1, 4], [4, 1], [1, 1, 1, 1, 1, 1, 1, 2]])
def test_a_lone_request_leaving_and_resuming_speculation_is_exact(
    pair: Pair, widths: list[int]
) -> None:
    """Pipelined classic steps keep the drafter's context rows, so speculation resumes
    after them with no re-prefill: after every step the drafter holds or has pending
    a context row for each token the target was fed, and the output stays classic's."""
    eng, request, decoder, lone, out = started_alone(pair, seed=17)
    step = 0
    while not lone.done:
        decoder.step([lone], widths[step % len(widths)])
        out += [token.id for token in lone.tokens]
        step += 1
        session = lone.session
        pending = sum(piece.shape[1] for piece in session.context or [])
        fed = len(request.prompt) + lone.emitted - 1  # every emitted token but the last
        assert session.draft_cache[0].offset + pending == fed, f"step {step}"
    request.max_tokens = 40
    assert out == solo(eng, request)


def test_a_lone_request_resuming_speculation_takes_its_queued_token_first(pair: Pair) -> None:
    """The queued classic forward is not rolled back when a round is wanted: its token
    is emitted first, as a batch's queued step is, and the next step drafts."""
    eng, request, decoder, lone, out = started_alone(pair, seed=19)
    for _ in range(3):
        decoder.step([lone], 1)
        out += [token.id for token in lone.tokens]
    assert lone.queued is not None
    assert decoder.step([lone], 4) == 1  # the pipeline's last token
    out += [token.id for token in lone.tokens]
    assert len(lone.tokens) == 1 and lone.queued is None
    assert decoder.step([lone], 4) == 4  # then a round
    out += [token.id for token in lone.tokens]
    while not lone.done:
        decoder.step([lone], 4)
        out += [token.id for token in lone.tokens]
    request.max_tokens = 40
    assert out == solo(eng, request)


def test_a_lone_request_joined_by_another_takes_its_queued_token_first(pair: Pair) -> None:
    """When a second request joins a lone pipelined one, the queued forward's token is
    the step's (the joiner emits nothing in it) rather than rolled back; then both decode
    together, each exactly as alone."""
    eng, request, decoder, lone, out = started_alone(pair, seed=23)
    for _ in range(3):
        decoder.step([lone], 1)
        out += [token.id for token in lone.tokens]
    assert lone.queued is not None
    other_request = requests(2, seed=29)[1]
    other_request.max_tokens = 40
    other = decoder.start(other_request.prompt, 40, other_request.params, GenerationStats(), True)
    joined: list[int] = []
    while other.prefill is not None:
        joined += [token.id for token in decoder.advance_prefill(other)]
    assert decoder.step([lone, other], 4) == 1  # the lone pipeline's last token
    assert (len(lone.tokens), other.tokens, lone.queued) == (1, [], None)
    out += [token.id for token in lone.tokens]
    for width in [4, 1, 1, 4] * 20:
        live = [sequence for sequence in (lone, other) if not sequence.done]
        if not live:
            break
        decoder.step(live, width)
        out += [token.id for token in lone.tokens] if lone in live else []
        joined += [token.id for token in other.tokens] if other in live else []
    request.max_tokens = 40
    assert (out, joined) == (solo(eng, request), solo(eng, other_request))
