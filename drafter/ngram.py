"""Prompt-lookup drafting: drafts copied from the request's own tokens, no weights.

The longest recent suffix of the request's tokens (prompt and output so far), of
MAX_NGRAM down to MIN_NGRAM tokens, is looked up among earlier positions; the tokens
that followed its latest earlier occurrence are the drafts. This is prompt lookup
decoding as vLLM's n-gram proposer and llama.cpp's simple n-gram drafter do it:
requests that copy spans of their prompt (edits, rewrites, quotes, transcripts) get
those spans drafted for free. A lone request drafts only as many tokens as the match
gives (none: a classic step); in a batch the block is padded to the step's width
with tokens verification rejects or, when they happen to be right, keeps.

It implements the drafter protocol (drafter/decoding.py: Drafter): the round,
verification, rollback, exactness and batching stay the decoder's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx

from drafter.decoding import DraftScores

MAX_NGRAM = 4  # the longest suffix looked up
MIN_NGRAM = 2  # a single repeated token predicts too little to pay for its rows
MAX_WIDTH = 16
SURE, UNSURE = 0.0, -1e4  # a draft's scores: its own token, and every other row's


@dataclass
class History:
    """One request's tokens so far, its draft "cache", with an index of their n-grams
    (as llama.cpp's n-gram cache keeps one): a lookup costs a few dictionary reads
    whatever the context's length, where a scan of the tokens would cost a step's
    share of a small model's decode on a long prompt."""

    tokens: list[int] = field(default_factory=list)
    # n-gram (MIN_NGRAM to MAX_NGRAM tokens) -> where the tokens after its latest
    # occurrence start, over the occurrences that something follows.
    after: dict[tuple[int, ...], int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        tokens, self.tokens = self.tokens, []
        self.extend(tokens)

    @property
    def state(self) -> list[mx.array]:
        """Nothing on the device (mlx-lm's caches' `state`, which a prefill evaluates)."""
        return []

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            end = len(self.tokens)  # the n-grams ending here are followed by `token`
            self.tokens.append(token)
            for n in range(MIN_NGRAM, min(MAX_NGRAM, end) + 1):
                self.after[tuple(self.tokens[end - n : end])] = end

    def follow(self, count: int, shortest: int = MIN_NGRAM) -> list[int]:
        """Up to `count` tokens that followed the latest earlier occurrence of the longest
        suffix of the tokens (MAX_NGRAM down to `shortest` tokens long, at least
        MIN_NGRAM); [] when none recurs."""
        for n in range(min(MAX_NGRAM, len(self.tokens) - 1), max(shortest, MIN_NGRAM) - 1, -1):
            start = self.after.get(tuple(self.tokens[-n:]))
            if start is not None:
                return self.tokens[start : start + count]
        return []


class NgramDrafter:
    """The drafter protocol over a request's own tokens."""

    target_layer_ids: list[int] = []  # it reads no target features
    prescribed_width = None

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    @property
    def head_tokens(self) -> int:
        return self.vocab_size

    @property
    def max_width(self) -> int:
        return MAX_WIDTH

    def make_cache(self, attention: str = "exact") -> list[Any]:
        return [History()]

    def set_linear(self, mode: str) -> None:
        """No products of its own."""

    def ingest(self, features: mx.array, cache: list[Any]) -> None:
        """No features to take in."""

    def observe(self, tokens: list[int], cache: list[Any]) -> None:
        """The request's prompt, then each step's emitted tokens, in order."""
        cache[0].extend(tokens)

    def proposes(self, cache: list[Any]) -> bool:
        """Whether the lookup finds a draft now: when not, a lone request's step is
        classic decode's, pipelined (drafter/batch.py)."""
        return bool(cache[0].follow(1))

    def draft_scores(
        self, anchor: int, features: mx.array | None, cache: list[Any], width: int
    ) -> DraftScores:
        """Scores for the drafts the lookup finds, up to width - 1 of them (maybe none)."""
        return scores_of(cache[0].follow(width - 1), self.vocab_size)

    def draft_scores_batch(
        self,
        anchors: list[int],
        features: list[mx.array | None],
        caches: list[list[Any]],
        width: int,
    ) -> DraftScores:
        """Every request's drafts padded to width - 1 rows (a batch steps at one width):
        the padding repeats the request's last token."""
        rows = []
        for cache in caches:
            found = cache[0].follow(width - 1)
            rows.append(found + [cache[0].tokens[-1]] * (width - 1 - len(found)))
        return copied_scores(mx.array(rows, dtype=mx.int32), self.vocab_size)


def scores_of(drafts: list[int], vocab_size: int) -> DraftScores:
    """(len(drafts), V) scores whose argmax rows are `drafts`."""
    if not drafts:
        return DraftScores(mx.zeros((0, vocab_size)))
    return copied_scores(mx.array(drafts, dtype=mx.int32), vocab_size)


def copied_scores(ids: mx.array, vocab_size: int) -> DraftScores:
    """Scores (..., V) whose argmax rows are the copied tokens `ids` (...)."""
    return DraftScores(mx.where(ids[..., None] == mx.arange(vocab_size), SURE, UNSURE))
