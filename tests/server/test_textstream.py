"""TextStream: only final text is released; stop strings are cut, even across tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mlx_lm.tokenizer_utils import load as load_tokenizer

from drafter.decoding import Token
from server.textstream import TextStream


@pytest.fixture(scope="module")
def tokenizer(tiny_model: Path) -> Any:
    return load_tokenizer(tiny_model)


def push_all(stream: TextStream, ids: list[int]) -> list[str]:
    """Push like the worker does: stop pushing once a stop string was found."""
    pieces = []
    for i in ids:
        pieces.append(stream.push(Token(i, -1.0)).text)
        if stream.stopped:
            break
    return [*pieces, stream.finish().text]


def test_pieces_concatenate_to_the_decoded_text(tokenizer: Any) -> None:
    text = "def fib(n):\n    return n"
    pieces = push_all(TextStream(tokenizer), tokenizer.encode(text))
    assert "".join(pieces) == text
    assert all(pieces[:-1])  # ASCII: every token is final at once


def test_a_multibyte_character_is_released_only_when_complete(tokenizer: Any) -> None:
    ids = tokenizer.encode("aé")  # byte-level: é is two tokens
    assert len(ids) == 3
    assert push_all(TextStream(tokenizer), ids) == ["a", "", "é", ""]


def test_a_stop_string_spanning_tokens_is_cut_and_never_released(tokenizer: Any) -> None:
    stream = TextStream(tokenizer, ["END"])
    pieces = push_all(stream, tokenizer.encode("abcENDxyz")[:6])
    assert "".join(pieces) == "abc"
    assert stream.stopped


def test_a_possible_stop_prefix_is_held_until_it_diverges(tokenizer: Any) -> None:
    stream = TextStream(tokenizer, ["END"])
    ids = tokenizer.encode("aENx")
    assert [stream.push(Token(i, -1.0)).text for i in ids] == ["a", "", "", "ENx"]
    assert not stream.stopped


def test_the_earliest_of_several_stops_wins(tokenizer: Any) -> None:
    stream = TextStream(tokenizer, ["yz", "b"])
    assert "".join(push_all(stream, tokenizer.encode("abcxyz"))) == "a"


def test_tokens_come_out_with_the_text_they_complete(tokenizer: Any) -> None:
    stream = TextStream(tokenizer, ["zz"])
    ids = tokenizer.encode("aéz")
    released = []
    for i in ids:
        released += [(p.token.id, p.start) for p in stream.push(Token(i, -1.0)).tokens]
    released += [(p.token.id, p.start) for p in stream.finish().tokens]
    assert released == [(ids[0], 0), (ids[1], 1), (ids[2], 1), (ids[3], 2)]
