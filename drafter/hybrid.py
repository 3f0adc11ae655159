"""DFlash with prompt lookup beside it: a round whose lookup finds a long copy drafts
the copy instead of the DFlash block.

A DFlash block is trained to guess the next few tokens; a request that copies spans of
its prompt (an edit, a rewrite, a quote) has the right ones in its own tokens. Each
round asks the lookup first (drafter/ngram.py: History): when the request's last
`LONG_MATCH` tokens recur earlier and what followed them fills the whole block, that
copy is the round's drafts and the DFlash forward is skipped; otherwise DFlash drafts.
A batch drafts by lookup only when every request's lookup fills its block, so a step
runs one drafter forward or none. Either way DFlash's context keeps up: a round drafted
by lookup takes in the features its round would have (`ingest`).

It implements the drafter protocol (drafter/decoding.py: Drafter), so the round,
verification, rollback, exactness and batching stay the decoder's.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from drafter.decoding import DraftScores
from drafter.dflash import DFlashDrafter
from drafter.ngram import MAX_NGRAM, History, copied_scores

LONG_MATCH = MAX_NGRAM  # a shorter suffix recurs by chance in everyday text


class HybridDrafter:
    """A DFlash drafter whose rounds a long lookup match may replace. Its cache: the
    DFlash caches, then the request's token history."""

    def __init__(self, dflash: DFlashDrafter, vocab_size: int) -> None:
        self.dflash = dflash
        self.vocab_size = vocab_size

    @property
    def target_layer_ids(self) -> list[int]:
        return self.dflash.target_layer_ids

    @property
    def prescribed_width(self) -> int | None:
        return self.dflash.prescribed_width

    @property
    def head_tokens(self) -> int:
        return self.dflash.head_tokens

    @property
    def max_width(self) -> int:
        return self.dflash.max_width

    def make_cache(self, attention: str = "exact") -> list[Any]:
        return [*self.dflash.make_cache(attention), History()]

    def set_linear(self, mode: str) -> None:
        self.dflash.set_linear(mode)

    def ingest(self, features: mx.array, cache: list[Any]) -> None:
        self.dflash.ingest(features, cache[:-1])

    def observe(self, tokens: list[int], cache: list[Any]) -> None:
        """The request's prompt, then each step's emitted tokens, in order."""
        cache[-1].extend(tokens)

    def proposes(self, cache: list[Any]) -> bool:
        """It always drafts a block."""
        return True

    def draft_scores(
        self, anchor: int, features: mx.array, cache: list[Any], width: int
    ) -> DraftScores:
        return self.draft_scores_batch([anchor], [features], [cache], width)[0]

    def draft_scores_batch(
        self,
        anchors: list[int],
        features: list[mx.array],
        caches: list[list[Any]],
        width: int,
    ) -> DraftScores:
        """The copies when every request's lookup fills its block, else DFlash's block."""
        copies = [cache[-1].follow(width - 1, LONG_MATCH) for cache in caches]
        if all(len(copy) == width - 1 for copy in copies):
            for context, cache in zip(features, caches, strict=True):
                self.ingest(context, cache)
            return copied_scores(mx.array(copies, dtype=mx.int32), self.vocab_size)
        own = [cache[:-1] for cache in caches]
        return self.dflash.draft_scores_batch(anchors, features, own, width)
