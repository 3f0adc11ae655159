"""The DFlash speculative round loop.

    prefill the target, capturing the tapped layers -> context features
    repeat:
      draft   B-1 tokens from the block [anchor, mask, ...] in one drafter forward
      verify  [anchor, d1 .. d(B-1)] in ONE target forward (B rows), capturing again
      choose  the target's token for every row exactly as classic decode does
      accept  the longest agreeing prefix (greedy) or by speculative sampling
      emit    the accepted drafts and the target's next token (the new anchor)
      rollback the target cache to the anchor + accepted rows; their captured
              features extend the drafter's context

The width B is fixed for the whole request. Row i's penalty counts include
the drafts before it, so a row's choice equals what classic decode would
choose after the same tokens.

A round costs one drafter forward, one target forward and, on the greedy
path, one host sync: every row's log-probabilities and choice are one
vectorised operation over the (B, V) logits, evaluated together with the
drafts. `RoundTimer` (for `draftwise profile`) splits a round into stages by
evaluating each stage's outputs as it ends.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import mlx.core as mx
import mlx.nn as nn

from drafter import acceptance, rollback
from drafter.capture import installed
from drafter.decoding import Drafter, GenerationStats, Token, make_tokens, prefill_tapped
from drafter.sampling import (
    SamplingParams,
    TokenChooser,
    has_penalties,
    sampling_logprobs,
    token_logprobs,
)

if TYPE_CHECKING:
    from drafter.engine import Engine

STAGES = ("draft", "verify", "choose", "sync", "rollback", "rest")


def speculative_generate(
    engine: Engine,
    prompt: list[int],
    max_tokens: int,
    params: SamplingParams,
    stats: GenerationStats,
    ignore_eos: bool = False,
) -> Iterator[list[Token]]:
    """Yield the tokens of each round (the first holds the prefill's token)."""
    yield from Session(engine, params, stats, ignore_eos).generate(prompt, max_tokens)


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


class Session:
    """One request's speculative state; tests read `cache` between rounds."""

    def __init__(
        self,
        engine: Engine,
        params: SamplingParams,
        stats: GenerationStats,
        ignore_eos: bool = False,
        width: int | None = None,
        timer: RoundTimer | None = None,
    ):
        self.engine = engine
        self.model: nn.Module = engine.model
        if engine.drafter is None:
            raise ValueError("speculative decoding needs a drafter")
        self.drafter: Drafter = engine.drafter
        self.width: int = engine.block_size if width is None else width
        if self.width is None or self.width < 2:
            raise ValueError(f"speculative decoding needs a block width >= 2, got {self.width}")
        self.params = params
        self.stats = stats
        self.timer = timer
        self.eos_ids = set() if ignore_eos else engine.eos_ids
        self.vocab = engine.vocab_size
        rollback.prepare(self.model)
        self.capture = installed(self.model, self.drafter.target_layer_ids)
        self.cache: list[Any] = []  # the target's; prefill makes it (or restores it)
        self.draft_cache = self.drafter.make_cache(engine.stable_attention)
        self.chooser = TokenChooser(params)
        self.counts = mx.zeros((self.vocab,), mx.float32) if has_penalties(params) else None
        stats.block_size = self.width
        if len(stats.accepted_per_position) < self.width - 1:
            stats.accepted_per_position.extend([0] * (self.width - 1))

    def mark(self, stage: str, *arrays: Any) -> None:
        if self.timer is not None:
            self.timer.mark(stage, *arrays)

    def prefill(self, prompt: list[int]) -> tuple[mx.array, mx.array]:
        """Feed the prompt as classic decode does (after what the prompt cache holds of
        it); return its last logits row and the tapped features of every prompt row."""
        self.cache, start, cached = self.engine.start_cache(prompt, self.stats, features=True)
        logits, features = prefill_tapped(self.model, prompt[start:], self.cache, self.capture)
        everything = mx.concatenate(([] if cached is None else [cached]) + features, axis=1)
        self.engine.remember(prompt, self.cache, everything)
        return logits, everything

    def generate(self, prompt: list[int], max_tokens: int) -> Iterator[list[Token]]:
        if max_tokens <= 0:
            return
        logits, features = self.prefill(prompt)
        logprobs = token_logprobs(logits, self.counts, self.params)
        anchor = self.chooser.choose(logprobs).item()
        self.count([anchor])
        yield make_tokens([anchor], logprobs[None], self.params)
        emitted = 1
        while emitted < max_tokens and anchor not in self.eos_ids:
            if self.timer is not None:
                self.timer.begin()
            tokens, rows, features = self.round(anchor, features, max_tokens - emitted)
            emitted += len(tokens)
            anchor = tokens[-1]
            out = make_tokens(tokens, rows, self.params)
            if self.timer is not None:
                self.timer.end()
            yield out

    def round(
        self, anchor: int, features: mx.array, budget: int
    ) -> tuple[list[int], mx.array, mx.array]:
        """One draft-verify-accept round emitting at most `budget` tokens; returns
        them, the (n, V) logprob rows they were chosen from, and the kept rows' features.

        The target cache keeps the anchor and every emitted token but the last
        (the next anchor): exactly what classic decode has fed at that point."""
        drafts, draft_logprobs = self.draft(anchor, features)
        self.mark("draft", drafts)
        ckpt = rollback.checkpoint(self.cache)
        verify = mx.concatenate([mx.array([anchor]), drafts])
        logits = self.model(verify[None], cache=self.cache)[0]
        verified = self.capture.features()
        self.mark("verify", logits, verified)
        rows = self.row_logprobs(logits, drafts)  # (B, V): row i as classic decode would
        if self.params.greedy:
            choices = self.chooser.choose(rows)
            self.mark("choose", choices)
            mx.eval(drafts, choices)  # the round's one host sync
            draft_list = drafts.tolist()
            choice_list = choices.tolist()
            n = acceptance.accept_greedy(choice_list, draft_list)
            next_token = choice_list[n]
            self.mark("sync")
        else:
            target = sampling_logprobs(rows, self.params)
            self.mark("choose", target)
            mx.eval(drafts, target, draft_logprobs)
            draft_list = drafts.tolist()
            n, next_token = acceptance.accept_sampled(
                target, draft_logprobs, draft_list, self.chooser
            )
            self.mark("sync")
        self.record(n)
        tokens = self.truncate(draft_list[:n] + [next_token], budget)
        kept = len(tokens)  # the anchor and the emitted drafts
        rollback.rollback(self.cache, ckpt, kept, self.width)
        self.mark("rollback", [c.state for c in self.cache])
        self.count(tokens)
        return tokens, rows[:kept], verified[:, :kept]

    def draft(self, anchor: int, features: mx.array) -> tuple[mx.array, mx.array | None]:
        """B-1 draft tokens (lazy) and, when sampling, the distribution they came from."""
        logits = self.drafter.draft_logits(anchor, features, self.draft_cache, self.width)
        if self.params.greedy:
            return mx.argmax(logits, axis=-1), None
        logprobs = sampling_logprobs(token_logprobs(logits, None, self.params), self.params)
        return mx.random.categorical(logprobs, key=self.chooser.next_key()), logprobs

    def row_logprobs(self, logits: mx.array, drafts: mx.array) -> mx.array:
        """Reported logprobs of every verify row at once, each as a classic decode step
        after the same tokens: row i's penalty counts include drafts 1..i."""
        if self.counts is None:
            return token_logprobs(logits, None, self.params)
        seen = mx.concatenate(
            [mx.zeros((1, self.vocab)), mx.cumsum(one_hots(drafts, self.vocab), 0)]
        )
        return token_logprobs(logits, self.counts + seen, self.params)

    def count(self, tokens: list[int]) -> None:
        if self.counts is not None:
            self.counts = self.counts + one_hots(mx.array(tokens), self.vocab).sum(axis=0)

    def truncate(self, tokens: list[int], budget: int) -> list[int]:
        """Cut at the token budget and right after the first EOS, as classic decode stops."""
        tokens = tokens[:budget]
        for i, token in enumerate(tokens):
            if token in self.eos_ids:
                return tokens[: i + 1]
        return tokens

    def record(self, n_accepted: int) -> None:
        self.stats.rounds += 1
        self.stats.drafted += self.width - 1
        self.stats.accepted += n_accepted
        for i in range(n_accepted):
            self.stats.accepted_per_position[i] += 1
