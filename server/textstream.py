"""Tokens in, text out: incremental detokenization with stop strings.

Text is released only when it is final: bytes of an unfinished UTF-8
character, and any tail that could still become a stop string, are held back.
A stop string is never released, even when it spans several tokens. Streaming
and non-streaming responses both concatenate the same released pieces, so
their texts are equal by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from drafter.decoding import Token

REPLACEMENT = "\ufffd"


@dataclass
class Placed:
    """A token and the span of text it completed (start..end in the stream's text)."""

    token: Token
    start: int
    end: int | None = None


@dataclass
class Piece:
    text: str = ""
    tokens: list[Placed] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.text or self.tokens)


class TextStream:
    """Detokenizes one sequence; `push` and `finish` return what may be shown now."""

    def __init__(self, tokenizer: Any, stops: list[str] | tuple[str, ...] = ()) -> None:
        self.tokenizer = tokenizer
        self.stops = [stop for stop in stops if stop]
        self.ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0
        self.text = ""
        self.released = 0
        self.pending: list[Placed] = []
        self.stopped = False

    def push(self, token: Token) -> Piece:
        if self.stopped:
            raise RuntimeError("push after a stop string")
        self.ids.append(token.id)
        placed = Placed(token, len(self.text))
        self.pending.append(placed)
        self.append(self.decode_step())
        return self.release(final=False)

    def finish(self) -> Piece:
        """Flush everything held back (the sequence ended)."""
        if self.stopped:
            return Piece()
        prefix_text, new_text = self.window()
        rest = new_text[len(prefix_text) :]
        self.prefix_offset = self.read_offset = len(self.ids)
        self.append(rest)
        return self.release(final=True)

    def window(self) -> tuple[str, str]:
        """The decoded window without and with the unread tokens (offsets as in TGI)."""
        prefix_text = self.tokenizer.decode(self.ids[self.prefix_offset : self.read_offset])
        return prefix_text, self.tokenizer.decode(self.ids[self.prefix_offset :])

    def decode_step(self) -> str:
        """The new final text, once it no longer ends in an unfinished character."""
        prefix_text, new_text = self.window()
        if len(new_text) > len(prefix_text) and not new_text.endswith(REPLACEMENT):
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            return new_text[len(prefix_text) :]
        return ""

    def append(self, delta: str) -> None:
        if not delta:
            return
        self.text += delta
        for placed in self.pending:
            if placed.end is None:
                placed.end = len(self.text)

    def release(self, final: bool) -> Piece:
        stop_at = self.find_stop()
        if stop_at is not None:
            self.stopped = True
            tokens = [p for p in self.pending if p.start < stop_at]
            return self.take(stop_at, tokens)
        if final:
            for placed in self.pending:
                placed.end = len(self.text) if placed.end is None else placed.end
            return self.take(len(self.text), self.pending)
        safe = len(self.text) - self.held_tail()
        ready = []
        for placed in self.pending:
            if placed.end is None or placed.end > safe:
                break
            ready.append(placed)
        return self.take(safe, ready)

    def take(self, upto: int, tokens: list[Placed]) -> Piece:
        piece = Piece(self.text[self.released : upto], list(tokens))
        self.released = max(self.released, upto)
        self.pending = self.pending[len(tokens) :]
        return piece

    def find_stop(self) -> int | None:
        # A stop cannot start inside released text: it would have been held back.
        found = [i for stop in self.stops if (i := self.text.find(stop, self.released)) >= 0]
        return min(found) if found else None

    def held_tail(self) -> int:
        """Length of the longest unreleased tail that is a proper prefix of a stop string."""
        unreleased = len(self.text) - self.released
        longest = 0
        for stop in self.stops:
            for k in range(min(len(stop) - 1, unreleased), longest, -1):
                if self.text.endswith(stop[:k]):
                    longest = k
                    break
        return longest
