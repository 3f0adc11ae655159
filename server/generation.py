"""One completion request, run on the model worker thread.

The HTTP side builds a `CompletionPlan` (already tokenized and validated); this
module drives the engine round by round, turns tokens into text pieces with
legacy logprobs, and reports them through `emit`. Between rounds it asks
`should_stop` whether the client went away or the deadline passed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from drafter.decoding import GenerationStats, Token
from drafter.engine import Engine
from drafter.sampling import SamplingParams
from server.textstream import Piece, Placed, TextStream


@dataclass(frozen=True)
class ChoicePlan:
    index: int
    prompt: int  # index into CompletionPlan.prompts
    params: SamplingParams


@dataclass(frozen=True)
class CompletionPlan:
    prompts: list[list[int]]
    choices: list[ChoicePlan]
    max_tokens: int
    stop: tuple[str, ...] = ()
    echo: bool = False
    logprobs: int | None = None
    ignore_eos: bool = False  # EOS is an ordinary token; only max_tokens (or stop) ends


@dataclass(frozen=True)
class Chunk:
    index: int
    text: str
    logprobs: dict[str, list[Any]] | None
    eos: bool = False  # the end-of-sequence token's logprob only (its text is never shown)


@dataclass(frozen=True)
class Finished:
    index: int
    finish_reason: str
    completion_tokens: int


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    stats: GenerationStats = field(default_factory=GenerationStats)

    def add_stats(self, stats: GenerationStats) -> None:
        total = self.stats
        total.block_size = stats.block_size or total.block_size
        total.cached_tokens += stats.cached_tokens
        total.rounds += stats.rounds
        total.drafted += stats.drafted
        total.accepted += stats.accepted
        for position, count in enumerate(stats.accepted_per_position):
            if position < len(total.accepted_per_position):
                total.accepted_per_position[position] += count
            else:
                total.accepted_per_position.append(count)


class Stopped(Exception):
    """Generation was abandoned between rounds; `reason` is 'cancelled' or 'timeout'."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


Emit = Callable[[Chunk | Finished], None]
ShouldStop = Callable[[], str | None]


def run_completion(
    engine: Engine, plan: CompletionPlan, emit: Emit, should_stop: ShouldStop
) -> Usage:
    usage = Usage(prompt_tokens=sum(len(prompt) for prompt in plan.prompts))
    names = TokenNames(engine.tokenizer)
    echoes: dict[int, tuple[str, dict[str, list[Any]] | None]] = {}
    for choice in plan.choices:
        if (reason := should_stop()) is not None:
            raise Stopped(reason)
        prompt = plan.prompts[choice.prompt]
        offset = 0
        if plan.echo:
            if choice.prompt not in echoes:
                echoes[choice.prompt] = echo_prompt(engine, prompt, plan.logprobs, names)
            text, logprobs = echoes[choice.prompt]
            emit(Chunk(choice.index, text, logprobs))
            offset = len(text)
        stats = GenerationStats()
        finished = run_choice(engine, plan, choice, prompt, offset, names, emit, should_stop, stats)
        usage.completion_tokens += finished.completion_tokens
        usage.add_stats(stats)
        emit(finished)
    return usage


def run_choice(
    engine: Engine,
    plan: CompletionPlan,
    choice: ChoicePlan,
    prompt: list[int],
    offset: int,
    names: TokenNames,
    emit: Emit,
    should_stop: ShouldStop,
    stats: GenerationStats,
) -> Finished:
    stream = TextStream(engine.tokenizer, plan.stop)
    eos = set() if plan.ignore_eos else engine.eos_ids
    generated = 0
    finish_reason = "length"

    def send(piece: Piece) -> None:
        if piece:
            logprobs = names.legacy(piece.tokens, offset) if plan.logprobs is not None else None
            emit(Chunk(choice.index, piece.text, logprobs))

    # One event per round, not per token: each event wakes the event loop, whose work
    # then competes with the round loop for the GIL.
    rounds = engine.generate(prompt, plan.max_tokens, choice.params, stats, plan.ignore_eos)
    eos_token: Token | None = None
    for round_tokens in rounds:
        released = Piece()
        for token in round_tokens:
            generated += 1
            if token.id in eos:
                finish_reason, eos_token = "stop", token
                break
            piece = stream.push(token)
            released = Piece(released.text + piece.text, released.tokens + piece.tokens)
            if stream.stopped:
                finish_reason = "stop"
                break
        send(released)
        if finish_reason == "stop":
            break
        if (reason := should_stop()) is not None:
            raise Stopped(reason)
    send(stream.finish())
    if eos_token is not None and plan.logprobs is not None:
        # Scoring clients (lm-eval) read the last entry as the generated token: it is
        # in the logprobs, though its text is not in `text`.
        end = Placed(eos_token, len(stream.text), len(stream.text))
        emit(Chunk(choice.index, "", names.legacy([end], offset), eos=True))
    return Finished(choice.index, finish_reason, generated)


def echo_prompt(
    engine: Engine, prompt: list[int], logprobs: int | None, names: TokenNames
) -> tuple[str, dict[str, list[Any]] | None]:
    """The prompt's text and, when asked, each prompt token's logprob (the first has none)."""
    scored: list[Token | None] = (
        engine.score(prompt, logprobs) if logprobs is not None else [None] * len(prompt)
    )
    stream = TextStream(engine.tokenizer)
    placed: list[Placed] = []
    text = ""
    for token_id, score in zip(prompt, scored, strict=True):
        piece = stream.push(score or Token(token_id, float("nan")))
        text += piece.text
        placed += piece.tokens
    piece = stream.finish()
    text += piece.text
    placed += piece.tokens
    return text, None if logprobs is None else names.legacy(placed, 0)


class TokenNames:
    """Token ids as text for the legacy logprobs shape, cached per request."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.cache: dict[int, str] = {}

    def name(self, token_id: int) -> str:
        if token_id not in self.cache:
            self.cache[token_id] = self.tokenizer.decode([token_id])
        return self.cache[token_id]

    def legacy(self, tokens: list[Placed], offset: int) -> dict[str, list[Any]]:
        """OpenAI legacy logprobs: {tokens, token_logprobs, top_logprobs, text_offset}."""
        result: dict[str, list[Any]] = {
            "tokens": [],
            "token_logprobs": [],
            "top_logprobs": [],
            "text_offset": [],
        }
        for placed in tokens:
            token = placed.token
            scored = token.logprob == token.logprob  # NaN marks "no logprob" (first prompt token)
            result["tokens"].append(self.name(token.id))
            result["token_logprobs"].append(token.logprob if scored else None)
            top = token.top_logprobs if scored else None
            result["top_logprobs"].append(
                None if top is None else {self.name(i): lp for i, lp in top.items()}
            )
            result["text_offset"].append(offset + placed.start)
        return result
