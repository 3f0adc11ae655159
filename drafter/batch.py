"""Many requests in one target forward per step (continuous batching).

Every request keeps its own `Session` (drafter/speculative.py): its own target
cache, drafter cache, chooser and penalty counts. A step opens a round on each
session at the step's width W, runs ONE target forward over all their verify
rows (B requests x W rows), and closes each round on its own slice of the
logits, as the solo round does. The target sees the batch through one view per
layer over the sessions' own caches:

- `BatchKV` (attention layers): each request's new keys and values go into its
  own KVCache; attention reads every request's keys right-padded to the
  longest, under a mask that is each request's own causal mask over its own
  keys. Right padding keeps each request's real keys where they sit when it
  runs alone, and its RoPE positions are its own (`offset` is per request).
- `BatchArrays` (Gated DeltaNet layers): the requests' recurrent states
  stacked on the batch axis, split back after the forward.

So acceptance and rollback stay per request and unchanged (drafter/rollback.py),
requests of any lengths can join or leave between steps, and a batch of one is
exactly the solo round. The drafter, too, runs once per step for every
request (drafter/dflash.py pads and masks its per-request context the same way).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, KVCache

from drafter import rollback
from drafter.attention import StableKVCache, batch_key_length
from drafter.decoding import GenerationStats, Token, make_tokens
from drafter.engine import Engine
from drafter.sampling import SamplingParams
from drafter.speculative import Round, Session


class BatchKV:
    """One attention layer's view over B requests' own KVCaches."""

    def __init__(self, caches: list[KVCache]):
        self.caches = caches
        self.offset = mx.array([cache.offset for cache in caches])  # RoPE, per request
        self.keys: mx.array | None = None  # qwen3_5 orders its last cache with mx.depends
        self.stable = isinstance(caches[0], StableKVCache)  # pad keys to whole 256-row steps

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None) -> Any:
        """(B, 1, N, K) boolean: query j of request b (at position offset_b + j) sees
        that request's keys 0 .. offset_b + j; K is the longest request's key count."""
        if window_size is not None:
            raise ValueError("batched decoding does not support sliding-window attention")
        starts = [cache.offset for cache in self.caches]
        width = batch_key_length(max(starts) + N, self.stable)
        limit = mx.array(starts)[:, None] + mx.arange(N)[None]
        return (mx.arange(width)[None, None] <= limit[:, :, None])[:, None]

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        for b, cache in enumerate(self.caches):
            cache.update_and_fetch(keys[b : b + 1], values[b : b + 1])
        width = batch_key_length(max(cache.offset for cache in self.caches), self.stable)
        self.keys = right_padded([cache.keys for cache in self.caches], self.caches, width)
        fetched = right_padded([cache.values for cache in self.caches], self.caches, width)
        return self.keys, fetched


def right_padded(buffers: list[mx.array], caches: list[KVCache], width: int) -> mx.array:
    """Each request's first `offset` rows, zero-padded on the right to `width`, stacked."""
    rows = []
    for buffer, cache in zip(buffers, caches, strict=True):
        real = buffer[..., : cache.offset, :]
        if cache.offset < width:
            pad = mx.zeros((*real.shape[:2], width - cache.offset, real.shape[3]), real.dtype)
            real = mx.concatenate([real, pad], axis=2)
        rows.append(real)
    return mx.concatenate(rows, axis=0)


class BatchArrays(ArraysCache):
    """One recurrent layer's view: B requests' states stacked on the batch axis."""

    def __init__(self, caches: list[ArraysCache]):
        super().__init__(len(caches[0].cache))
        if any(state is None for cache in caches for state in cache.cache):
            raise ValueError("a request joined the batch before its prefill")
        self.caches = caches
        per_state = zip(*(cache.cache for cache in caches), strict=True)
        self.cache = [mx.concatenate(states) for states in per_state]
        self.recording = rollback.record_inputs(self)

    def scatter(self, checkpoints: list[rollback.Checkpoint], layer: int) -> None:
        """Give each request its row of the new state and of what the layer was fed."""
        rollback.disarm(self)
        for b, (cache, ckpt) in enumerate(zip(self.caches, checkpoints, strict=True)):
            cache.cache = [state[b : b + 1] for state in self.cache]
            rollback.lend_recording(ckpt, layer, self.recording, b)


def batchable(cache: list[Any]) -> bool:
    """Whether a request with this target cache can share a batched forward."""
    return all(type(entry) is ArraysCache or isinstance(entry, KVCache) for entry in cache)


def views(sessions: list[Session]) -> list[BatchKV | BatchArrays]:
    per_layer = zip(*(session.cache for session in sessions), strict=True)
    return [
        BatchArrays(list(caches)) if isinstance(caches[0], ArraysCache) else BatchKV(list(caches))
        for caches in per_layer
    ]


@dataclass(eq=False)
class Sequence:
    """One generation in a batch: its session and how far it has come."""

    session: Session
    prompt: list[int]
    max_tokens: int
    stats: GenerationStats
    emitted: int = 0
    anchor: int | None = None  # the last emitted token: the next round's first row
    prefill: Generator[None, None, None] | None = None
    tokens: list[Token] = field(default_factory=list)  # what the last step emitted
    accepted: int = 0  # drafts the last round kept

    @property
    def decoding(self) -> bool:
        return self.prefill is None and not self.done

    @property
    def done(self) -> bool:
        if self.anchor is None:
            return False
        return self.emitted >= self.max_tokens or self.anchor in self.session.eos_ids

    def emit(self, tokens: list[int], rows: mx.array) -> list[Token]:
        self.emitted += len(tokens)
        self.anchor = tokens[-1]
        self.tokens = make_tokens(tokens, rows, self.session.params)
        return self.tokens


class BatchDecoder:
    """Starts sequences, advances their prefills a chunk at a time, and runs the
    batched rounds. The scheduler (server/scheduler.py) decides who is in a step."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.width = engine.block_size if engine.speculative else 1  # the ceiling

    def start(
        self,
        prompt: list[int],
        max_tokens: int,
        params: SamplingParams,
        stats: GenerationStats,
        ignore_eos: bool = False,
    ) -> Sequence:
        session = Session(self.engine, params, stats, ignore_eos, width=self.width)
        sequence = Sequence(session, prompt, max_tokens, stats)
        sequence.prefill = session.prefill_chunks(prompt)
        return sequence

    def advance_prefill(self, sequence: Sequence) -> list[Token]:
        """Run one prefill chunk; once the prompt is in, the first token (else [])."""
        assert sequence.prefill is not None
        try:
            next(sequence.prefill)
            return []
        except StopIteration:
            sequence.prefill = None
        first = sequence.session.first
        sequence.emitted, sequence.anchor, sequence.tokens = 1, first[0].id, first
        return first

    def step(self, sequences: list[Sequence], width: int) -> None:
        """One round over every decoding sequence at `width` rows each (1: a classic
        step); each sequence's `tokens` then holds what it emitted."""
        if not sequences:
            return
        width = min(width, self.width)
        if len(sequences) == 1 or not all(batchable(s.session.cache) for s in sequences):
            for sequence in sequences:
                self.solo_round(sequence, width)
            return
        sessions = [sequence.session for sequence in sequences]
        anchors = [sequence.anchor for sequence in sequences]
        drafted: list[mx.array | None] = [None] * len(sessions)
        drafter = self.engine.drafter
        if width > 1 and drafter is not None:  # one drafter forward for every request
            contexts = [session.take_context() for session in sessions]
            caches = [session.draft_cache for session in sessions]
            logits = drafter.draft_logits_batch(anchors, contexts, caches, width)
            drafted = [logits[b] for b in range(len(sessions))]
        rounds = [
            session.open(anchor, width, draft_logits)
            for session, anchor, draft_logits in zip(sessions, anchors, drafted, strict=True)
        ]
        layer_views = views(sessions)
        tokens = mx.stack([current.tokens for current in rounds])
        logits = self.engine.model(tokens, cache=layer_views)
        checkpoints = [current.ckpt for current in rounds]
        for layer, view in enumerate(layer_views):
            if isinstance(view, BatchArrays):
                view.scatter(checkpoints, layer)
        capture = sessions[0].capture
        features = None if capture is None else capture.features()
        for b, (session, current) in enumerate(zip(sessions, rounds, strict=True)):
            session.judge(current, logits[b], None if features is None else features[b : b + 1])
        mx.eval([current.arrays() for current in rounds])  # the step's one host sync
        for sequence, current in zip(sequences, rounds, strict=True):
            self.close(sequence, current)

    def solo_round(self, sequence: Sequence, width: int) -> None:
        assert sequence.anchor is not None
        before = sequence.stats.accepted
        budget = sequence.max_tokens - sequence.emitted
        tokens, rows = sequence.session.round(sequence.anchor, budget, width)
        sequence.accepted = sequence.stats.accepted - before
        sequence.emit(tokens, rows)

    def close(self, sequence: Sequence, current: Round) -> None:
        before = sequence.stats.accepted
        budget = sequence.max_tokens - sequence.emitted
        tokens, rows = sequence.session.close(current, budget)
        sequence.accepted = sequence.stats.accepted - before
        sequence.emit(tokens, rows)
