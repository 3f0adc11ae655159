"""Grammar-constrained token choice (structured outputs), through llguidance.

A request's grammar is llguidance's grammar text (`json_schema_grammar` makes it from a
JSON schema; `lark_grammar` from a Lark grammar). `Grammars` compiles each one once
against the target's tokenizer and hands every request its own `Constraint`: the
allowed-token mask for each row a step chooses, advanced by the tokens emitted.

A verify block's row i is chosen after the anchor and drafts 1..i, so its mask is the
grammar state after those drafts (`Constraint.masks`); the matcher is rolled back
after computing them, and only the tokens the round emits advance it. A draft the
grammar refuses ends the masks there: the target's masked choice at that row can never
equal it, so no later row is accepted.

Greedy requests that report no logprobs need no mask where the target's own choice is
allowed (`Constraint.accept`): a row's mask is filled only where its choice is refused.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import llguidance
import llguidance.hf
import llguidance.numpy
import mlx.core as mx
import numpy as np

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions


class GrammarError(ValueError):
    """A grammar llguidance cannot compile; the message says where."""


# JSON as models write it and as json.dumps does (`{"a": 1, "b": [2, 3]}`): the spacing
# a drafter proposes too, and no room to run on in whitespace.
JSON_LAYOUT: JsonCompileOptions = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
}


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """The grammar of JSON text valid against `schema`, laid out as JSON_LAYOUT."""
    try:
        return llguidance.LLMatcher.grammar_from_json_schema(
            json.dumps(schema), defaults=JSON_LAYOUT
        )
    except (ValueError, TypeError) as error:
        raise GrammarError(str(error)) from None


def lark_grammar(lark: str) -> str:
    return llguidance.LLMatcher.grammar_from_lark(lark)


class Grammars:
    """The target's tokenizer as llguidance reads it, and each grammar compiled once
    (a prototype matcher per grammar text, deep-copied for each request)."""

    def __init__(self, hf_tokenizer: Any, vocab_size: int, eos: list[int]) -> None:
        self.vocab_size = vocab_size
        self.eos = set(eos)
        self.tokenizer = llguidance.hf.from_tokenizer(
            hf_tokenizer, n_vocab=vocab_size, eos_token=eos
        )
        self.compiled: dict[str, llguidance.LLMatcher] = {}
        self.lock = threading.Lock()  # the HTTP side checks, the worker uses

    def compile(self, grammar: str) -> llguidance.LLMatcher:
        """The grammar's prototype matcher; GrammarError when it does not compile."""
        with self.lock:
            matcher = self.compiled.get(grammar)
            if matcher is None:
                matcher = llguidance.LLMatcher(self.tokenizer, grammar)
                if matcher.is_error():
                    raise GrammarError(matcher.get_error())
                self.compiled[grammar] = matcher
            return matcher

    def constraint(self, grammar: str) -> Constraint:
        return Constraint(self.compile(grammar).deep_copy(), self.vocab_size, self.eos)


class Constraint:
    """One request's place in its grammar."""

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int, eos: set[int]) -> None:
        self.matcher = matcher
        self.vocab_size = vocab_size
        self.eos = eos  # never consumed while looking ahead: a stopped matcher does not roll back

    def masks(self, drafts: list[int]) -> mx.array:
        """(len(drafts) + 1, V) booleans: row i the tokens allowed after drafts[:i].
        Rows past the first draft the grammar refuses allow everything: no choice
        there is ever kept."""
        ends = [i for i, token in enumerate(drafts) if token in self.eos]
        valid = min([self.matcher.validate_tokens(drafts), *ends])  # nothing follows an end
        bits = llguidance.numpy.allocate_token_bitmask(len(drafts) + 1, self.vocab_size)
        for i in range(valid + 1):
            llguidance.numpy.fill_next_token_bitmask(self.matcher, bits, i)
            if i < valid:
                self.matcher.consume_token(drafts[i])
        self.matcher.rollback(valid)
        return mx.array(unpacked(bits, self.vocab_size))

    def accept(
        self, choices: list[int], drafts: list[int], masked_choice: Callable[[int], int]
    ) -> tuple[int, int]:
        """Greedy acceptance under the grammar, from each row's unmasked choice: where
        the grammar allows it, it is also the masked choice (the best allowed token is
        the best token); elsewhere `masked_choice(i)` chooses row i under the mask of
        the matcher's state then (after drafts[:i]). Returns (drafts accepted, the
        token after them), as `masks` and an argmax over every row would; few rows
        need a mask filled."""
        ends = [i for i, token in enumerate(drafts) if token in self.eos]
        valid = min([self.matcher.validate_tokens(drafts), *ends])
        consumed = 0
        for i, choice in enumerate(choices):
            if i > valid:  # past an accepted end: nothing here is emitted
                break
            if i >= valid or choice != drafts[i]:
                if self.matcher.validate_tokens([choice]) == 0:
                    choice = masked_choice(i)
                if i >= len(drafts) or choice != drafts[i]:
                    self.matcher.rollback(consumed)
                    return i, choice
            if i < valid:  # draft i is accepted; an end is never consumed
                self.matcher.consume_token(drafts[i])
                consumed += 1
        self.matcher.rollback(consumed)
        return valid + 1, choices[valid + 1]

    def mask(self) -> mx.array:
        """(V,) booleans: the tokens allowed in the matcher's state now."""
        return mx.array(self.mask_now())

    def mask_now(self) -> np.ndarray:
        bits = llguidance.numpy.allocate_token_bitmask(1, self.vocab_size)
        llguidance.numpy.fill_next_token_bitmask(self.matcher, bits, 0)
        return unpacked(bits, self.vocab_size)[0]

    def draft(self, scores: np.ndarray, ids: np.ndarray | None) -> list[int]:
        """Greedy drafts the grammar allows, one row at a time: row i of the drafter's
        `scores` (over `ids`, or the whole vocabulary) after drafts 1..i-1, its mask
        filled only where its best token is refused. Fewer than the rows where the
        grammar allows nothing more."""
        drafts: list[int] = []
        for row in scores:
            best = int(np.argmax(row))
            token = best if ids is None else int(ids[best])
            if self.matcher.validate_tokens([token]) == 0:
                allowed = self.mask_now()
                masked_row = np.where(allowed if ids is None else allowed[ids], row, -np.inf)
                best = int(np.argmax(masked_row))
                if not np.isfinite(masked_row[best]):
                    break  # the drafter proposes nothing the grammar allows here
                token = best if ids is None else int(ids[best])
            drafts.append(token)
            if token in self.eos:
                break  # nothing follows the end, which is not consumed
            self.matcher.consume_token(token)  # allowed
        self.matcher.rollback(len(drafts) - (1 if drafts and drafts[-1] in self.eos else 0))
        return drafts

    def advance(self, tokens: list[int]) -> None:
        """The emitted tokens, in order (one the grammar refuses cannot have been chosen)."""
        for token in tokens:
            if self.matcher.is_stopped():
                return
            self.matcher.consume_token(token)


def masked(scores: mx.array, allowed: mx.array) -> mx.array:
    """Scores with every token the grammar refuses at -inf."""
    return mx.where(allowed, scores, mx.array(-mx.inf, dtype=scores.dtype))


def unpacked(bits: np.ndarray, vocab_size: int) -> np.ndarray:
    """llguidance's (rows, words) bitmask as (rows, vocab_size) booleans."""
    allowed = np.unpackbits(bits.view(np.uint8), axis=1, bitorder="little")
    return allowed[:, :vocab_size].astype(np.bool_)
