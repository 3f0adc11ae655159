"""A request's decoding state and its speculative round (the decoder, drafter/batch.py,
runs every round through here, alone or batched).

    prefill the target, capturing the tapped layers -> context features
    repeat:
      draft   B-1 tokens from the block [anchor, mask, ...] in one drafter forward
      verify  [anchor, d1 .. d(B-1)] in ONE target forward (B rows), capturing again
      choose  the target's token for every row exactly as classic decode does
      accept  the longest agreeing prefix (greedy) or by speculative sampling
      emit    the accepted drafts and the target's next token (the new anchor)
      rollback the target cache to the anchor + accepted rows; their captured
              features extend the drafter's context

The width B is the step's (the goodput control may pick fewer rows per step, down
to 1: a classic decode step, no drafts); a lookup drafter (drafter/ngram.py) drafts
only as far as its match goes when alone. Under a grammar (drafter/grammar.py) the
drafts and every row's choice are masked by it.
Row i's penalty counts include the drafts before it, so a row's choice equals
what classic decode would choose after the same tokens.

A round runs in three phases so that a batch can share the verify forward:
`open` (draft, checkpoint), the target forward over `Round.tokens`, `judge`
(lazy choices), one host sync over `Round.arrays`, then `close` (accept,
rollback, count).

A round costs one drafter forward, one target forward and, on the greedy path,
one host sync (two under a grammar, whose masks need the drafts on the host): every
row's choice is one vectorised argmax over the (B, V) scores, evaluated together with
the drafts (the rows' log-probabilities only when the request reports them:
drafter/sampling.py). `RoundTimer` (for `draftwise profile`) splits a round into stages
by evaluating each stage's outputs as it ends.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mlx.core as mx
import numpy as np

from drafter import acceptance, rollback
from drafter.attention import reserve
from drafter.decoding import (
    Drafter,
    DraftScores,
    GenerationStats,
    Token,
    make_tokens,
    prefill_steps,
)
from drafter.grammar import masked
from drafter.sampling import (
    SamplingParams,
    TokenChooser,
    has_penalties,
    log_softmax,
    reported,
    sampling_logprobs,
    token_logprobs,
    token_scores,
)

if TYPE_CHECKING:
    from drafter.engine import Engine

STAGES = ("draft", "verify", "choose", "sync", "rollback", "rest")


def one_hots(tokens: mx.array, vocab: int) -> mx.array:
    return (tokens[:, None] == mx.arange(vocab)).astype(mx.float32)


class RoundTimer:
    """Wall time per round stage. `mark` evaluates the stage's outputs, so the
    stages are timed apart at the cost of a host sync each (profiling only)."""

    def __init__(self) -> None:
        self.stages: dict[str, list[float]] = defaultdict(list)
        self._last = 0.0

    def begin(self) -> None:
        self._last = time.perf_counter()

    def mark(self, stage: str, *arrays: Any) -> None:
        if arrays:
            mx.eval(*arrays)
        now = time.perf_counter()
        self.stages[stage].append(now - self._last)
        self._last = now

    def end(self) -> None:
        self.mark("rest")


@dataclass
class Round:
    """One round in flight. drafts: the B-1 drafted ids (lazy); after `judge`, rows:
    (B, V) reported logprobs (lazy, evaluated only if `report`), and choices (greedy)
    or target (sampled: the distribution each row samples from)."""

    anchor: int
    width: int
    drafts: mx.array
    draft_logprobs: mx.array | None
    ckpt: rollback.Checkpoint | None  # None: a batch's cache, rolled back by the batch
    rows: mx.array | None = None
    choices: mx.array | None = None
    target: mx.array | None = None
    verified: mx.array | None = None  # (1, B, F) tapped features of the verify rows
    report: list[mx.array] | None = None  # the rows, when the request reports logprobs
    # Under a grammar, greedy and reporting no logprobs: the unmasked rows, masked in
    # `close` only where a choice needs it (Constraint.accept)
    unmasked: mx.array | None = None

    @property
    def tokens(self) -> mx.array:
        """The rows the target verifies: [anchor, d1 .. d(B-1)]."""
        anchor = mx.array([self.anchor])
        return anchor if self.width == 1 else mx.concatenate([anchor, self.drafts])

    def arrays(self) -> list[mx.array]:
        """What the round's one host sync evaluates."""
        arrays = [self.drafts, self.choices if self.choices is not None else self.target]
        arrays += [] if self.draft_logprobs is None else [self.draft_logprobs]
        return arrays + (self.report or [])


class Session:
    """One request's decoding state; tests read `cache` between rounds.

    With a drafter, rounds speculate (a width-1 round is then a classic step that
    keeps the drafter's context); a session of width 1 has no drafter and decodes
    classically."""

    def __init__(
        self,
        engine: Engine,
        params: SamplingParams,
        stats: GenerationStats,
        ignore_eos: bool = False,
        width: int | None = None,
        timer: RoundTimer | None = None,
    ) -> None:
        self.engine = engine
        self.width: int = (engine.block_size or 1) if width is None else width
        # A width-1 session is classic decode: no drafter, no taps, no drafter context.
        self.drafter: Drafter | None = engine.drafter if self.width > 1 else None
        if self.width < 1 or (self.width > 1 and self.drafter is None):
            raise ValueError(f"a block width of {self.width} needs a drafter and >= 1")
        if self.drafter is not None and self.width > self.drafter.max_width:
            raise ValueError(
                f"a block width of {self.width} is above the drafter's {self.drafter.max_width}"
            )
        self.params = params
        self.stats = stats
        self.timer = timer
        self.eos_ids = set() if ignore_eos else engine.eos_ids
        self.vocab = engine.vocab_size
        self.forward = engine.forward
        # Its forwards return the features a feature-reading drafter (DFlash) takes in.
        self.taps = self.drafter is not None and bool(self.drafter.target_layer_ids)
        self.draft_cache: list[Any] = []
        if self.drafter is not None:
            self.draft_cache = self.drafter.make_cache(engine.attention)
            stats.block_size = self.width
        self.cache: list[Any] = []  # the target's; prefill makes it (or restores it)
        # Features of kept rows not yet in the drafter's context, in the order fed.
        self.context: list[mx.array] | None = None
        self.chooser = TokenChooser(params)
        self.counts = mx.zeros((self.vocab,), mx.float32) if has_penalties(params) else None
        self.constraint = None if params.grammar is None else engine.constraint(params.grammar)
        self.last_accepted = 0  # drafts the last round kept (the batch's goodput reads it)
        missing = self.width - 1 - len(stats.accepted_per_position)
        stats.accepted_per_position.extend([0] * max(missing, 0))

    def mark(self, stage: str, *arrays: Any) -> None:
        if self.timer is not None:
            self.timer.mark(stage, *arrays)

    def prefill_chunks(
        self, prompt: list[int], max_tokens: int
    ) -> Generator[None, None, list[Token]]:
        """Feed the prompt as classic decode does (after what the prompt cache holds of
        it), one evaluated chunk per step; then choose and return the first token.
        max_tokens: what the request may still emit; the caches are then sized for it
        (`attention.reserve`), so no round grows them."""
        self.cache, start, cached = self.engine.start_cache(prompt, self.stats, features=self.taps)
        done = yield from prefill_steps(self.forward, prompt[start:], self.cache, self.taps)
        logits, everything = done.logits, None
        if self.taps:
            everything = mx.concatenate(([] if cached is None else [cached]) + done.features, 1)
        self.engine.remember(prompt, self.cache, everything)
        if self.engine.reserve_kv:  # after `remember`, which copies the cache as it is
            reserve(self.cache + self.draft_cache, len(prompt), max_tokens + self.width)
        scores = token_scores(logits, self.counts, self.params)
        if self.constraint is not None:
            scores = masked(scores, self.masks([])[0])
        anchor = self.chooser.choose(scores).item()
        if self.drafter is not None:
            self.drafter.observe(list(prompt), self.draft_cache)
        if self.drafter is not None and everything is not None:
            # The prompt's context rows are projected here, with the prompt, not in
            # the first round (drafter/dflash.py: DFlashDrafter.ingest), and after the
            # first token's sync: that token waits only for the target, as classic
            # decode's does, while the device projects the rows as the host builds the
            # first round.
            self.drafter.ingest(everything, self.draft_cache)
            mx.async_eval([c.state for c in self.draft_cache])
            self.context = [everything[:, :0]]  # nothing new for the first round
        self.emitted([anchor])
        return make_tokens([anchor], log_softmax(scores)[None], self.params)

    def round(
        self, anchor: int, budget: int, width: int | None = None
    ) -> tuple[list[int], mx.array]:
        """One draft-verify-accept round, alone, at `width` rows (default: the
        session's): see `open`, `judge` and `close`."""
        current = self.open(anchor, self.width if width is None else width)
        self.mark("draft", current.drafts)
        logits, verified = self.forward(current.tokens[None], self.cache, taps=self.taps)
        logits = logits[0]
        if self.constraint is not None:
            mx.async_eval(logits)  # the device verifies while the host fills the masks
        self.mark("verify", logits, *([] if verified is None else [verified]))
        self.judge(current, logits, verified)
        self.mark("choose", *current.arrays()[1:])
        mx.eval(current.arrays())  # the round's one host sync
        return self.close(current, budget)

    def open(
        self,
        anchor: int,
        width: int,
        drafted: DraftScores | None = None,
        checkpoint: bool = True,
    ) -> Round:
        """Draft the round's B-1 tokens (lazy) and checkpoint the target cache; the
        caller then runs the target over `tokens` (alone, or batched with others).
        drafted: this request's B-1 rows of a batched drafter forward (drafter/batch.py);
        by default the drafter runs here. checkpoint=False: the target cache is a
        batch's, which rolls itself back."""
        drafts, draft_logprobs = mx.array([], dtype=mx.int32), None
        if width > 1:
            if drafted is None:
                assert self.drafter is not None
                drafted = self.drafter.draft_scores(
                    anchor, self.take_context(), self.draft_cache, width
                )
            if drafted.scores.shape[0] > 0:  # a lookup drafter may find nothing: a classic step
                drafts, draft_logprobs = self.draft(drafted)
        ckpt = rollback.checkpoint(self.cache) if checkpoint else None
        return Round(anchor, 1 + drafts.shape[0], drafts, draft_logprobs, ckpt)

    def take_context(self) -> mx.array | None:
        """The features gathered since the drafter's last block; it takes them in now
        (None for a drafter that reads none)."""
        if not self.taps:
            return None
        pieces, self.context = self.context, None
        assert pieces, "a round needs the features of the tokens before it"
        return pieces[0] if len(pieces) == 1 else mx.concatenate(pieces, axis=1)

    def keep_features(self, features: mx.array) -> None:
        """(1, n, F) features of rows the target was fed and kept: the drafter takes them
        in with its next block."""
        if self.context is None:
            self.context = []
        self.context.append(features)  # in place: a long classic run keeps thousands

    def judge(self, current: Round, logits: mx.array, verified: mx.array | None) -> None:
        """Choose for every verify row at once (lazy). logits: (B, V) for this request."""
        current.verified = verified
        scores = self.row_scores(logits, current.drafts)  # row i as classic decode
        if self.constraint is not None and self.params.greedy and self.params.logprobs is None:
            current.unmasked = scores
        elif self.constraint is not None:  # row i: the grammar after drafts 1..i (a host sync)
            scores = masked(scores, self.masks(current.drafts.tolist()))
        current.rows = log_softmax(scores)
        current.report = reported(current.rows, self.params)
        if self.params.greedy:
            current.choices = self.chooser.choose(scores)
        elif current.width == 1:
            current.choices = self.chooser.choose(scores[0])[None]
        else:
            current.target = sampling_logprobs(current.rows, self.params)

    def close(self, current: Round, budget: int) -> tuple[list[int], mx.array]:
        """Accept, emit at most `budget` tokens, roll the target back to them; returns
        them and the (n, V) logprob rows they were chosen from. Call after the sync.

        The target cache keeps the anchor and every emitted token but the last
        (the next anchor): exactly what classic decode has fed at that point."""
        draft_list = current.drafts.tolist()
        if current.unmasked is not None:
            n, next_token = self.accept_constrained(current, draft_list)
        elif current.choices is not None:
            choice_list = current.choices.tolist()
            n = acceptance.accept_greedy(choice_list, draft_list)
            next_token = choice_list[n]
        else:
            n, next_token = acceptance.accept_sampled(
                current.target, current.draft_logprobs, draft_list, self.chooser
            )
        self.mark("sync")
        tokens = self.truncate(draft_list[:n] + [next_token], budget)
        # Drafts past the token budget or an EOS were accepted but never emitted: the
        # counters leave them out, so acceptance length is tokens emitted per round.
        self.record(min(n, len(tokens) - 1), current.width)
        kept = len(tokens)  # the anchor and the emitted drafts
        if current.ckpt is not None:
            rollback.rollback(self.cache, current.ckpt, kept, current.width)
            self.mark("rollback", [c.state for c in self.cache])
        self.emitted(tokens)
        if current.verified is not None:
            self.keep_features(current.verified[:, :kept])
        assert current.rows is not None  # judge() chose them
        return tokens, current.rows[:kept]

    def draft(self, drafted: DraftScores) -> tuple[mx.array, mx.array | None]:
        """B-1 draft tokens (lazy) from the drafter's scores and, when sampling, the
        distribution they came from (q, the draft distribution, over the vocabulary)."""
        if self.params.greedy and self.constraint is not None:
            return self.constrained_drafts(drafted), None
        if self.params.greedy:
            return drafted.tokens(), None
        logits = drafted.logits()
        logprobs = sampling_logprobs(token_logprobs(logits, None, self.params), self.params)
        return mx.random.categorical(logprobs, key=self.chooser.next_key()), logprobs

    def constrained_drafts(self, drafted: DraftScores) -> mx.array:
        """Greedy drafts under the grammar (a host sync on the drafter's scores), so the
        drafter proposes only what the target may choose. Rows the grammar leaves
        nothing for repeat the last draft: refused at verify, never kept."""
        assert self.constraint is not None
        scores = np.array(drafted.scores.astype(mx.float32))  # waits for the drafter
        ids = None if drafted.ids is None else np.array(drafted.ids)
        start = time.perf_counter()
        drafts = self.constraint.draft(scores, ids)
        self.stats.mask_s += time.perf_counter() - start
        drafts += [drafts[-1] if drafts else 0] * (scores.shape[0] - len(drafts))
        return mx.array(drafts, dtype=mx.int32)

    def row_scores(self, logits: mx.array, drafts: mx.array) -> mx.array:
        """The scores of every verify row at once, each as a classic decode step after
        the same tokens: row i's penalty counts include drafts 1..i."""
        if self.counts is None:
            return token_scores(logits, None, self.params)
        if drafts.size == 0:
            return token_scores(logits, self.counts[None], self.params)
        seen = mx.concatenate(
            [mx.zeros((1, self.vocab)), mx.cumsum(one_hots(drafts, self.vocab), 0)]
        )
        return token_scores(logits, self.counts + seen, self.params)

    def accept_constrained(self, current: Round, drafts: list[int]) -> tuple[int, int]:
        """Greedy acceptance under the grammar from the unmasked choices, a row's mask
        filled only where its own choice is refused; timed into the request's stats."""
        assert self.constraint is not None and current.unmasked is not None
        assert current.choices is not None
        unmasked, constraint = current.unmasked, self.constraint

        def masked_choice(row: int) -> int:
            self.stats.masked_rows += 1
            return int(mx.argmax(masked(unmasked[row], constraint.mask())).item())

        start = time.perf_counter()
        accepted = constraint.accept(current.choices.tolist(), drafts, masked_choice)
        self.stats.mask_s += time.perf_counter() - start
        return accepted

    def masks(self, drafts: list[int]) -> mx.array:
        """The grammar's masks for a step's rows, timed into the request's stats."""
        assert self.constraint is not None
        start = time.perf_counter()
        masks = self.constraint.masks(drafts)
        self.stats.mask_s += time.perf_counter() - start
        self.stats.masked_rows += len(drafts) + 1
        return masks

    def emitted(self, tokens: list[int]) -> None:
        """The tokens this request emitted: penalty counts and the grammar follow them."""
        if self.counts is not None:
            self.counts = self.counts + one_hots(mx.array(tokens), self.vocab).sum(axis=0)
        if self.constraint is not None:
            self.constraint.advance(tokens)
        if self.drafter is not None:
            self.drafter.observe(tokens, self.draft_cache)

    def truncate(self, tokens: list[int], budget: int) -> list[int]:
        """Cut at the token budget and right after the first EOS, as classic decode stops."""
        tokens = tokens[:budget]
        for i, token in enumerate(tokens):
            if token in self.eos_ids:
                return tokens[: i + 1]
        return tokens

    def record(self, n_accepted: int, width: int) -> None:
        self.last_accepted = n_accepted
        if width == 1:
            return  # a classic step: nothing drafted
        self.stats.rounds += 1
        self.stats.widths[width] = self.stats.widths.get(width, 0) + 1
        self.stats.drafted += width - 1
        self.stats.accepted += n_accepted
        for i in range(n_accepted):
            self.stats.accepted_per_position[i] += 1
