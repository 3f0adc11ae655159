"""Many requests in one target forward per step (continuous batching).

Every request keeps its own `Session` (drafter/speculative.py): its drafter cache,
chooser and penalty counts. A step opens a round on each session at the step's
width W, runs ONE drafter forward and ONE target forward over all their rows
(B requests x W rows), and closes each round on its own slice of the logits, as
the solo round does. While the batch's membership stays the same, the target
caches are shared per layer (`BatchState`):

- `SharedKV` (attention layers): one (B, H, capacity, D) buffer; request b's keys
  are its first lengths[b] rows (right-padded), so they sit where they sit when
  it runs alone, and its RoPE positions are its own. A forward writes every
  request's rows at its own length in one scatter; attention reads the buffer up
  to the longest request under each request's own causal mask; rolling a request
  back is setting its length. With vector attention (the CUDA default) the batch's
  masked attention takes MLX's unfused path: cuDNN is off, and the vector kernel
  takes no mask.
- `SharedArrays` (Gated DeltaNet layers): the states stacked on the batch axis;
  a request that rejected drafts is re-run on its accepted rows from the state
  before the forward (drafter/rollback.py's rule, per row).

When requests leave, their rows go back to their own caches and out of the shared
buffers (one gather); joiners' rows are appended (one concatenation); any other change
rebuilds the state from the requests' own caches. A batch of one is the solo round.

While a batch's width holds, its classic steps are pipelined as mlx-lm's
generate_step is: the next step's forward is queued, fed the choices still lazy,
before this step's are read back (`QueuedBatch`). Requests joining and leaving do not
stall it: the queued step covers the requests that go on and those new to the step.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, KVCache

from drafter import rollback
from drafter.attention import (
    PolyexpKVCache,
    right_padded,
    whole_steps,
)
from drafter.decoding import DraftScores, GenerationStats, Token, make_tokens
from drafter.sampling import SamplingParams
from drafter.speculative import Round, RoundTimer, Session

if TYPE_CHECKING:
    from drafter.engine import Engine


class SharedKV:
    """One attention layer's cache for the whole batch.

    keys, values: (B, H, capacity, D); request b's rows are [0, lengths[b]), right-padded,
    so its keys sit where they sit when it runs alone. A forward writes every request's
    new rows at its own length in one scatter and reads the buffer up to the longest;
    `commit` then keeps only each request's accepted rows (rollback is a length)."""

    def __init__(self, caches: list[KVCache]) -> None:
        self.uses_polyexp = isinstance(caches[0], PolyexpKVCache)  # attention.dispatch reads it
        self.lengths = [cache.offset for cache in caches]
        capacity = whole_steps(max(self.lengths) + 1)
        self.keys = right_padded([c.keys for c in caches], self.lengths, capacity)
        self.values = right_padded([c.values for c in caches], self.lengths, capacity)
        for cache in caches:  # the batch holds the rows now; `release` gives them back
            cache.keys = cache.values = None

    @property
    def offset(self) -> mx.array:
        return mx.array(self.lengths)  # each request's own RoPE position

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None) -> Any:
        """(B, 1, N, K) boolean: query j of request b (at position lengths[b] + j) sees
        that request's keys 0 .. lengths[b] + j; K covers the longest request."""
        if window_size is not None:
            raise ValueError("batched decoding does not support sliding-window attention")
        width = max(self.lengths) + N
        limit = self.offset[:, None] + mx.arange(N)[None]
        return (mx.arange(width)[None, None] <= limit[:, :, None])[:, None]

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        B, H, N, _ = keys.shape
        self.grow(max(self.lengths) + N)
        rows = (self.offset[:, None] + mx.arange(N)[None])[:, None, :, None]
        self.keys = mx.put_along_axis(self.keys, mx.broadcast_to(rows, keys.shape), keys, 2)
        rows = mx.broadcast_to(rows, values.shape)
        self.values = mx.put_along_axis(self.values, rows, values, 2)
        width = max(self.lengths) + N
        return self.keys[..., :width, :], self.values[..., :width, :]

    def grow(self, needed: int) -> None:
        size = self.keys.shape[2]
        if needed > size:
            extra = whole_steps(needed) - size
            self.keys = mx.pad(self.keys, [(0, 0), (0, 0), (0, extra), (0, 0)])
            self.values = mx.pad(self.values, [(0, 0), (0, 0), (0, extra), (0, 0)])

    def commit(self, kept: list[int]) -> None:
        self.lengths = [length + k for length, k in zip(self.lengths, kept, strict=True)]

    def regroup(self, staying: list[int], joining: list[KVCache]) -> None:
        """Keep only the requests at `staying` (indices, in order), then append the
        joining caches' rows: one gather and one concatenation, not a rebuild."""
        if len(staying) < len(self.lengths):
            index = mx.array(staying)
            self.keys, self.values = self.keys[index], self.values[index]
            self.lengths = [self.lengths[i] for i in staying]
        if joining:
            lengths = [cache.offset for cache in joining]
            self.grow(max(lengths) + 1)
            capacity = self.keys.shape[2]
            keys = right_padded([c.keys for c in joining], lengths, capacity)
            values = right_padded([c.values for c in joining], lengths, capacity)
            self.keys = mx.concatenate([self.keys, keys])
            self.values = mx.concatenate([self.values, values])
            self.lengths += lengths
            for cache in joining:
                cache.keys = cache.values = None

    def release(self, caches: list[KVCache], rows: list[int] | None = None) -> None:
        """Hand each request (at `rows`, default all) its rows back as its own cache."""
        for b, cache in zip(range(len(caches)) if rows is None else rows, caches, strict=True):
            cache.keys, cache.values = self.keys[b : b + 1], self.values[b : b + 1]
            cache.offset = self.lengths[b]


class SharedArrays(ArraysCache):
    """One recurrent layer's state for the whole batch, stacked on the batch axis.
    `commit` rolls each request back to its accepted rows by re-running mlx-lm's own
    module on them from the state before the forward (drafter/rollback.py's rule)."""

    def __init__(self, caches: list[ArraysCache]) -> None:
        super().__init__(len(caches[0].cache))
        if any(state is None for cache in caches for state in cache.cache):
            raise ValueError("a request joined the batch before its prefill")
        per_state = zip(*(cache.cache for cache in caches), strict=True)
        self.cache = [mx.concatenate(states) for states in per_state]
        self.before: list[mx.array] = []
        self.recording = rollback.Recording()

    def arm(self) -> None:
        """Before a forward: keep the state, record what the layer is fed."""
        self.before = [state[...] for state in self.cache]
        self.recording = rollback.record_inputs(self)

    def commit(self, kept: list[int]) -> None:
        """Each request that rejected rows goes through rollback.rollback_arrays on its
        own row: its pre-step state and its slice of what the layer was fed."""
        rollback.disarm(self)
        inputs, module = self.recording.inputs, self.recording.module
        assert inputs is not None
        fed = inputs.shape[1]
        rows = [[state[b : b + 1] for state in self.cache] for b in range(len(kept))]
        for b, k in enumerate(kept):
            if k < fed:
                alone = ArraysCache(len(self.cache))
                row = rollback.Recording(module, inputs[b : b + 1], None)
                before = [state[b : b + 1] for state in self.before]
                snap = rollback.ArraysSnapshot(before, None, None, row)
                rollback.rollback_arrays(alone, snap, k, fed)
                rows[b] = alone.cache
        self.cache = [mx.concatenate(states) for states in zip(*rows, strict=True)]

    def regroup(self, staying: list[int], joining: list[ArraysCache]) -> None:
        """As SharedKV.regroup, on the batch axis of every state."""
        if len(staying) < self.cache[0].shape[0]:
            index = mx.array(staying)
            self.cache = [state[index] for state in self.cache]
        if joining:
            added = zip(*(cache.cache for cache in joining), strict=True)
            self.cache = [
                mx.concatenate([state, *more])
                for state, more in zip(self.cache, added, strict=True)
            ]

    def release(self, caches: list[ArraysCache], rows: list[int] | None = None) -> None:
        for b, cache in zip(range(len(caches)) if rows is None else rows, caches, strict=True):
            cache.cache = [state[b : b + 1] for state in self.cache]


def pipelinable(session: Session) -> bool:
    """Classic rounds alone can be pipelined when no token's choice waits on the one
    before it being counted (penalties) or matched (a grammar). A feature-reading
    drafter's context rows ride along with each queued feed."""
    return session.counts is None and session.constraint is None


def classic_now(session: Session, width: int) -> bool:
    """Whether a lone request's step is a classic one: width 1, or a drafter that finds
    nothing to draft now (a lookup without a match)."""
    return (
        width == 1 or session.drafter is None or not session.drafter.proposes(session.draft_cache)
    )


def classic_round(session: Session, logits: mx.array, ckpt: rollback.Checkpoint | None) -> Round:
    """A classic step's round, its one row judged (lazy): logits (1, V)."""
    current = Round(0, 1, mx.array([], dtype=mx.int32), None, ckpt)
    session.judge(current, logits, None)
    return current


def emit_classic(
    sequence: Sequence, token: int, rows: mx.array | None, features: mx.array | None
) -> None:
    """A classic step's token; its fed row's features (1, 1, F), kept, go to the
    drafter's context. rows: the logprobs it was chosen from (None: none reported)."""
    sequence.session.emitted([token])
    if features is not None:
        sequence.session.keep_features(features)
    sequence.emit([token], rows)


def argmax_chosen(session: Session) -> bool:
    """Whether a request's classic choice is its logits row's argmax and nothing else
    is read from the row: greedy, no bias, penalty or grammar, no logprobs reported.
    A batch of such requests chooses in one op (`BatchDecoder.queue_batch`)."""
    params = session.params
    plain = not params.logit_bias and session.counts is None and session.constraint is None
    return params.greedy and plain and params.logprobs is None


def queue_classic(session: Session, token: mx.array) -> Queued:
    """Feed `token` (lazy) to the target and queue the choice of the one after it (and,
    for a feature-reading drafter, the fed row's features)."""
    ckpt, key = rollback.checkpoint(session.cache), session.chooser.key
    logits, features = session.forward(token.reshape(1, 1), session.cache, taps=session.taps)
    current = classic_round(session, logits[0], ckpt)
    assert current.rows is not None and current.choices is not None
    queued = [current.choices, *(current.report or []), *([] if features is None else [features])]
    mx.async_eval(*queued)
    return Queued(ckpt, key, current.rows, current.choices, features)


def unqueue(sequence: Sequence) -> None:
    """Leave the pipeline: take the queued feed back out of the cache (rollback keeps 0
    of the 1 row fed) and the chooser's key back, so the last emitted token is again
    the next round's anchor and the seeded stream goes on where it stood."""
    if sequence.queued is not None:
        rollback.rollback(sequence.session.cache, sequence.queued.ckpt, 0, 1)
        sequence.session.chooser.key = sequence.queued.key
        sequence.queued = None


def batchable(cache: list[Any]) -> bool:
    """Whether a request with this target cache can share a batched forward."""
    return all(type(entry) is ArraysCache or isinstance(entry, KVCache) for entry in cache)


class SharedCaches:
    """Several requests' target caches (one list of layers each), shared per layer: the
    cache a batched forward takes (`layers`), armed before it and committed after."""

    def __init__(self, caches: list[list[Any]]) -> None:
        self.layers: list[SharedKV | SharedArrays] = [
            SharedArrays(list(c)) if isinstance(c[0], ArraysCache) else SharedKV(list(c))
            for c in zip(*caches, strict=True)
        ]

    def arm(self) -> None:
        for layer in self.layers:
            if isinstance(layer, SharedArrays):
                layer.arm()

    def commit(self, kept: list[int]) -> None:
        for layer in self.layers:
            layer.commit(kept)

    @property
    def by_length(self) -> bool:
        """Whether every layer keeps or drops rows by a length alone (attention only),
        so a fed row can stay uncommitted while the next step is queued."""
        return all(isinstance(layer, SharedKV) for layer in self.layers)


class BatchState(SharedCaches):
    """The target caches of a fixed set of sequences, shared per layer. Built when the
    batch's membership changes and released back into the sequences' own caches before
    the next change, so a request can leave (or run alone) at any step."""

    def __init__(self, sequences: list[Sequence]) -> None:
        super().__init__([s.session.cache for s in sequences])
        self.sequences = list(sequences)

    def release(self) -> None:
        for i, layer in enumerate(self.layers):
            layer.release([s.session.cache[i] for s in self.sequences])

    def regroup(self, sequences: list[Sequence]) -> bool:
        """Follow the batch to `sequences` in place when it only lost members and gained
        new ones at its end (as the scheduler orders them): the leavers get their rows
        back, the joiners' rows are appended. False (nothing changed) when the order
        changed otherwise: then the state is rebuilt."""
        if sequences == self.sequences:
            return True
        ids = {id(sequence) for sequence in sequences}
        staying = [b for b, s in enumerate(self.sequences) if id(s) in ids]
        kept = [self.sequences[b] for b in staying]
        if not staying or sequences[: len(kept)] != kept:  # the rest are then all new
            return False
        joining = sequences[len(kept) :]
        leaving = [b for b, s in enumerate(self.sequences) if id(s) not in ids]
        for i, layer in enumerate(self.layers):
            layer.release([self.sequences[b].session.cache[i] for b in leaving], leaving)
            layer.regroup(staying, [s.session.cache[i] for s in joining])
        self.sequences = list(sequences)
        return True


@dataclass
class Queued:
    """A lone classic sequence's next token, its forward already queued (the cache
    already holds the token it was fed); `ckpt` undoes that feed."""

    ckpt: rollback.Checkpoint
    key: mx.array  # the chooser's key before this choice (a sampled one draws a key)
    rows: mx.array  # (1, V) reported logprobs
    choice: mx.array  # (1,) the chosen token, lazy
    features: mx.array | None = None  # (1, 1, F) the fed row's, for the drafter's context


@dataclass
class QueuedBatch:
    """A batch's classic step in flight: its forward queued over the shared caches (the
    fed rows not yet committed), each request's choice judged but not read."""

    sequences: list[Sequence]
    rows: list[mx.array | None]  # each request's (1, V) logprob rows, lazy (None: unread)
    choices: mx.array  # (B,) the chosen tokens, lazy: the next step's fed rows
    features: mx.array | None  # (B, 1, F) the fed rows', for the drafter's context


@dataclass(eq=False)
class Sequence:
    """One generation in a batch: its session and how far it has come."""

    session: Session
    max_tokens: int
    emitted: int = 0
    anchor: int | None = None  # the last emitted token: the next round's first row
    prefill: Generator[None, None, list[Token]] | None = None  # its value: the first token
    tokens: list[Token] = field(default_factory=list)  # what the last step emitted
    queued: Queued | None = None  # alone and classic: the pipelined next token

    @property
    def decoding(self) -> bool:
        return self.prefill is None and not self.done

    @property
    def wants_another(self) -> bool:
        """Whether it decodes past the token in flight, so the next one may be queued."""
        return self.emitted + 1 < self.max_tokens

    @property
    def accepted(self) -> int:
        """Drafts the last round kept."""
        return self.session.last_accepted

    @property
    def done(self) -> bool:
        if self.anchor is None:
            return False
        # A complete grammar allows only the end token, so a constrained answer ends by it.
        return self.emitted >= self.max_tokens or self.anchor in self.session.eos_ids

    def emit(self, tokens: list[int], rows: mx.array | None) -> list[Token]:
        self.emitted += len(tokens)
        self.anchor = tokens[-1]
        self.tokens = make_tokens(tokens, rows, self.session.params)
        return self.tokens


class BatchDecoder:
    """Starts sequences, advances their prefills a chunk at a time, and runs the
    batched rounds. The scheduler (server/scheduler.py) decides who is in a step."""

    def __init__(self, engine: Engine, width: int | None = None) -> None:
        """width: the widest step its sequences take (1: classic decode, no drafter);
        default: the engine's resolved width, or 1 without a drafter."""
        self.engine = engine
        block = engine.block_size
        loaded = block if engine.speculative and block is not None else 1
        self.width = loaded if width is None else width  # the ceiling
        self.state: BatchState | None = None  # the shared caches of the last batch
        self.queued: QueuedBatch | None = None  # a batched classic step in flight

    def start(
        self,
        prompt: list[int],
        max_tokens: int,
        params: SamplingParams,
        stats: GenerationStats,
        ignore_eos: bool = False,
        timer: RoundTimer | None = None,
    ) -> Sequence:
        session = Session(self.engine, params, stats, ignore_eos, width=self.width, timer=timer)
        sequence = Sequence(session, max_tokens)
        sequence.prefill = session.prefill_chunks(prompt, max_tokens)
        return sequence

    def advance_prefill(self, sequence: Sequence) -> list[Token]:
        """Run one prefill chunk; once the prompt is in, the first token (else [])."""
        assert sequence.prefill is not None
        try:
            next(sequence.prefill)
            return []
        except StopIteration as done:
            sequence.prefill = None
            first: list[Token] = done.value
        sequence.emitted, sequence.anchor, sequence.tokens = 1, first[0].id, first
        return first

    def pipelined(self, sequences: list[Sequence]) -> bool:
        """Whether the next step over `sequences` finds its forward already queued."""
        return self.queued is not None or any(s.queued is not None for s in sequences)

    def step(self, sequences: list[Sequence], width: int) -> int:
        """One round over every decoding sequence at `width` rows each (1: a classic
        step); each sequence's `tokens` then holds what it emitted. Returns the width
        that ran: 1 where a lone request's step was classic (its lookup found nothing)."""
        if not sequences:
            return width
        width = min(width, self.width)
        if self.queued is not None:  # a batched classic step is in flight: take it
            self.take_queued(sequences, queue_next=width == 1)
            return 1
        alone = sequences[0].session
        if len(sequences) == 1 and pipelinable(alone) and classic_now(alone, width):
            self.release()
            self.pipelined_step(sequences[0])
            return 1
        if queued := [sequence for sequence in sequences if sequence.queued is not None]:
            # A round is wanted, or others joined: the queued forward's token comes first,
            # as a batch's queued step does, rather than being rolled back with its work
            # lost; sequences new to the step emit nothing.
            self.release()
            for sequence in sequences:
                sequence.tokens = []
            for sequence in queued:
                self.pipelined_step(sequence, queue_next=False)
            return 1
        if len(sequences) == 1 or not all(batchable(s.session.cache) for s in sequences):
            self.release()
            for sequence in sequences:
                self.solo_round(sequence, width)
            return width
        if self.state is None or not self.state.regroup(sequences):
            self.release()
            self.state = BatchState(sequences)
        state = self.state
        sessions = [sequence.session for sequence in sequences]
        anchors = [sequence.anchor for sequence in sequences if sequence.anchor is not None]
        assert len(anchors) == len(sequences)  # decoding sequences have emitted a token
        if width == 1 and state.by_length and all(map(pipelinable, sessions)):
            self.queued = self.queue_batch(sequences, mx.array(anchors))
            self.take_queued(sequences, queue_next=True)
            return 1
        drafted: list[DraftScores | None] = [None] * len(sessions)
        drafter = self.engine.drafter
        if width > 1 and drafter is not None:  # one drafter forward for every request
            contexts = [session.take_context() for session in sessions]
            caches = [session.draft_cache for session in sessions]
            scores = drafter.draft_scores_batch(anchors, contexts, caches, width)
            drafted = [scores[b] for b in range(len(sessions))]
        rounds = [
            session.open(anchor, width, own, checkpoint=False)
            for session, anchor, own in zip(sessions, anchors, drafted, strict=True)
        ]
        state.arm()
        tokens = mx.stack([r.tokens for r in rounds])
        logits, features = self.engine.forward(tokens, state.layers, taps=sessions[0].taps)
        if any(session.constraint is not None for session in sessions):
            mx.async_eval(logits)  # the device verifies while the host fills the masks
        for b, (session, current) in enumerate(zip(sessions, rounds, strict=True)):
            session.judge(current, logits[b], None if features is None else features[b : b + 1])
        mx.eval([current.arrays() for current in rounds])  # the step's one host sync
        for sequence, current in zip(sequences, rounds, strict=True):
            self.close(sequence, current)
        # The target cache keeps every emitted token's row: the anchor and the drafts
        # before the last emitted token (the next anchor).
        state.commit([len(sequence.tokens) for sequence in sequences])
        return width

    def release(self) -> None:
        """Give the sequences of the shared state their own caches back (a queued
        step's rows were never committed: they go)."""
        self.queued = None
        if self.state is not None:
            self.state.release()
            self.state = None

    def queue_batch(self, sequences: list[Sequence], tokens: mx.array) -> QueuedBatch:
        """Feed `tokens` (B,), one row per sequence, over the shared caches and queue
        each request's choice of the token after its row."""
        assert self.state is not None
        sessions = [sequence.session for sequence in sequences]
        logits, features = self.engine.forward(
            tokens[:, None], self.state.layers, taps=sessions[0].taps
        )
        extra = [] if features is None else [features]
        if all(map(argmax_chosen, sessions)):  # host work that does not grow with B
            choices = mx.argmax(logits[:, 0], axis=-1)
            mx.async_eval(choices, *extra)
            return QueuedBatch(list(sequences), [None] * len(sessions), choices, features)
        rounds = [classic_round(session, logits[b], None) for b, session in enumerate(sessions)]
        choices = mx.concatenate([current.choices for current in rounds])
        mx.async_eval(choices, *extra, *(r for c in rounds for r in c.report or []))
        return QueuedBatch(list(sequences), [c.rows for c in rounds], choices, features)

    def take_queued(self, sequences: list[Sequence], queue_next: bool) -> None:
        """Emit the queued step's tokens, pipelined like mlx-lm's generate_step: the next
        step's forward is queued (fed the choices, still lazy) before this one is read
        back (`queue_following`). Only the sequences still asked for keep their row and
        token; sequences new to the step emit nothing in it."""
        current, self.queued = self.queued, None
        assert current is not None and self.state is not None
        asked = {id(sequence) for sequence in sequences}
        kept = [id(sequence) in asked for sequence in current.sequences]
        self.state.commit([int(keep) for keep in kept])
        if queue_next:
            self.queue_following(current, sequences, kept)
        for sequence in sequences:
            sequence.tokens = []
        tokens = current.choices.tolist()  # the step's one host sync
        features = current.features
        for b, (sequence, keep) in enumerate(zip(current.sequences, kept, strict=True)):
            if keep:
                fed = None if features is None else features[b : b + 1]
                emit_classic(sequence, tokens[b], current.rows[b], fed)

    def queue_following(
        self, current: QueuedBatch, sequences: list[Sequence], kept: list[bool]
    ) -> None:
        """Queue the next classic step over the sequences that go on after this token
        and those new to the step (fed their first token): requests joining and leaving
        do not stall the pipeline. One left alone decodes on its own (`pipelined_step`)."""
        going = [
            b
            for b, (sequence, keep) in enumerate(zip(current.sequences, kept, strict=True))
            if keep and sequence.wants_another
        ]
        members = {id(sequence) for sequence in current.sequences}
        joining = [sequence for sequence in sequences if id(sequence) not in members]
        following = [current.sequences[b] for b in going] + joining
        sessions = [sequence.session for sequence in following]
        if len(following) < 2 or not all(pipelinable(s) and batchable(s.cache) for s in sessions):
            return
        assert self.state is not None
        if not self.state.regroup(following):
            self.state.release()
            self.state = BatchState(following)
        tokens = current.choices
        if len(going) < len(current.sequences):  # some leave: the rows that go on
            tokens = tokens[mx.array(going, dtype=mx.int32)]
        if joining:  # fed their first token
            anchors = mx.array([sequence.anchor for sequence in joining], dtype=tokens.dtype)
            tokens = mx.concatenate([tokens, anchors])
        self.queued = self.queue_batch(following, tokens)

    def pipelined_step(self, sequence: Sequence, queue_next: bool = True) -> None:
        """Classic decode alone, pipelined like mlx-lm's generate_step: the next token's
        forward is queued before this one is read back (a host round trip saved per
        token; on CUDA a quarter of a small model's step). queue_next=False ends the
        pipeline: the step emits its token and queues nothing."""
        assert sequence.anchor is not None
        session = sequence.session
        current = sequence.queued or queue_classic(session, mx.array([sequence.anchor]))
        sequence.queued = None
        if queue_next and sequence.wants_another:
            sequence.queued = queue_classic(session, current.choice)
        emit_classic(sequence, current.choice.item(), current.rows, current.features)

    def solo_round(self, sequence: Sequence, width: int) -> None:
        assert sequence.anchor is not None
        budget = sequence.max_tokens - sequence.emitted
        sequence.emit(*sequence.session.round(sequence.anchor, budget, width))

    def close(self, sequence: Sequence, current: Round) -> None:
        budget = sequence.max_tokens - sequence.emitted
        sequence.emit(*sequence.session.close(current, budget))


def run_alone(decoder: BatchDecoder, sequence: Sequence, width: int) -> Iterator[list[Token]]:
    """Drive a started sequence through `decoder` alone to its end, at `width`: its
    prefill's first token, then what each step emitted. A batch of one is the served
    path for a lone request, so this is how every caller outside the server decodes."""
    if sequence.max_tokens <= 0:
        return
    first: list[Token] = []
    while sequence.prefill is not None:
        first = decoder.advance_prefill(sequence)
    yield first
    timer = sequence.session.timer
    while not sequence.done:
        if timer is not None:
            timer.begin()
        decoder.step([sequence], width)
        if timer is not None:
            timer.end()
        yield sequence.tokens
    unqueue(sequence)


def decode_together(
    engine: Engine, prompts: list[list[int]], max_tokens: int, params: SamplingParams
) -> list[list[Token]]:
    """Each prompt's tokens, all decoded together at the engine's width, EOS ignored."""
    decoder = BatchDecoder(engine)
    sequences = [
        decoder.start(prompt, max_tokens, params, GenerationStats(), ignore_eos=True)
        for prompt in prompts
    ]
    return run_together(decoder, sequences)


def run_together(decoder: BatchDecoder, sequences: list[Sequence]) -> list[list[Token]]:
    """Prefill started sequences, then step all that still decode together at the
    decoder's width, one target forward a step (as the server batches requests); each
    sequence's tokens."""
    out: list[list[Token]] = [[] for _ in sequences]
    for tokens, sequence in zip(out, sequences, strict=True):
        while sequence.prefill is not None:
            tokens += decoder.advance_prefill(sequence)
    while live := [(i, s) for i, s in enumerate(sequences) if not s.done]:
        decoder.step([s for _, s in live], decoder.width)
        for i, sequence in live:
            out[i] += sequence.tokens
    decoder.release()
    return out
