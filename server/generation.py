"""A completion's text, on the model worker thread.

The HTTP side builds a `CompletionPlan` (already tokenized and validated); the
scheduler (server/scheduler.py) decodes its choices and hands each round's tokens
to the choice's `ChoiceRun`, which turns them into text pieces with legacy
logprobs (stop strings, EOS) and reports them through `emit`. `Echoes` puts the
prompt first when the request asks for echo.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drafter.decoding import GenerationStats, Token
from drafter.engine import Engine
from server.events import ChoicePlan, Chunk, CompletionPlan, Finished
from server.textstream import Piece, Placed, TextStream

Emit = Callable[[Chunk | Finished], None]


class Echoes:
    """With `echo`, each choice's text starts with its prompt (scored once per prompt)."""

    def __init__(self, engine: Engine, plan: CompletionPlan, names: TokenNames) -> None:
        self.engine, self.plan, self.names = engine, plan, names
        self.done: dict[int, tuple[str, dict[str, list[Any]] | None]] = {}

    def emit(self, choice: ChoicePlan, emit: Emit) -> int:
        """Emit the echo for `choice` (if asked); returns the text offset it leaves."""
        if not self.plan.echo:
            return 0
        if choice.prompt not in self.done:
            prompt = self.plan.prompts[choice.prompt]
            self.done[choice.prompt] = echo_prompt(
                self.engine, prompt, self.plan.logprobs, self.names
            )
        text, logprobs = self.done[choice.prompt]
        emit(Chunk(choice.index, text, logprobs))
        return len(text)


class ChoiceRun:
    """One choice's text as its tokens arrive, a round at a time: stop strings, EOS,
    legacy logprobs. One event per round, not per token: each event wakes the event
    loop, whose work then competes with the round loop for the GIL."""

    def __init__(
        self,
        engine: Engine,
        plan: CompletionPlan,
        choice: ChoicePlan,
        names: TokenNames,
        emit: Emit,
        offset: int = 0,
    ) -> None:
        self.plan, self.choice, self.names, self.emit = plan, choice, names, emit
        self.prompt = plan.prompts[choice.prompt]
        self.offset = offset
        self.stream = TextStream(engine.tokenizer, plan.stop)
        self.eos = set() if plan.ignore_eos else engine.eos_ids
        self.stats = GenerationStats()
        self.generated = 0
        self.finish_reason = "length"
        self.eos_token: Token | None = None

    def send(self, piece: Piece) -> None:
        if piece:
            legacy = self.plan.logprobs is not None
            logprobs = self.names.legacy(piece.tokens, self.offset) if legacy else None
            self.emit(Chunk(self.choice.index, piece.text, logprobs))

    def push(self, round_tokens: list[Token]) -> bool:
        """Take one round's tokens; True once the choice has stopped (EOS or a stop
        string). Reaching max_tokens is the caller's to notice."""
        released = Piece()
        for token in round_tokens:
            self.generated += 1
            if token.id in self.eos:
                self.finish_reason, self.eos_token = "stop", token
                break
            piece = self.stream.push(token)
            released = Piece(released.text + piece.text, released.tokens + piece.tokens)
            if self.stream.stopped:
                self.finish_reason = "stop"
                break
        self.send(released)
        return self.finish_reason == "stop"

    def finish(self) -> Finished:
        """Flush held-back text; returns the choice's Finished event (not yet emitted)."""
        self.send(self.stream.finish())
        if self.eos_token is not None and self.plan.logprobs is not None:
            # Scoring clients (lm-eval) read the last entry as the generated token: it is
            # in the logprobs, though its text is not in `text`.
            text = self.stream.text
            end = Placed(self.eos_token, len(text), len(text))
            self.emit(Chunk(self.choice.index, "", self.names.legacy([end], self.offset), eos=True))
        return Finished(self.choice.index, self.finish_reason, self.generated, self.stats)


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

    def __init__(self, tokenizer: Any) -> None:
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
