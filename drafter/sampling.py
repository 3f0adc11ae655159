"""Token choice shared by classic and speculative decoding.

Both paths turn one row of target logits into a token the same way:

    logits -> logit_bias, presence/frequency penalties   (token_scores)
           -> the grammar's mask, if any                 (drafter/grammar.py: masked)
           -> argmax                                     (temperature 0)
           -> log-softmax                                (token_logprobs: the reported logprobs)
              -> temperature, top_p                      (sampling_logprobs)
              -> a seeded categorical draw               (temperature > 0)

Greedy decode takes the argmax of the scores themselves: the log-softmax only
shifts a row, and over a large vocabulary it costs several times the argmax, so it
is computed only when a request reports logprobs or samples.

Keeping this in one place is what lets greedy speculation equal classic
decode token for token, and speculative sampling reproduce the target's
distribution exactly.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import mlx.core as mx


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    logprobs: int | None = None  # number of alternatives per token; None = no logprobs
    grammar: str | None = None  # llguidance grammar text the output must match (drafter/grammar.py)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def has_penalties(params: SamplingParams) -> bool:
    return bool(params.presence_penalty or params.frequency_penalty)


def token_scores(logits: mx.array, counts: mx.array | None, params: SamplingParams) -> mx.array:
    """The scores tokens are chosen from, for logits rows (..., V).

    logit_bias is added, then OpenAI's penalties over the generated tokens
    (not the prompt): logit[t] -= presence * (count[t] > 0) + frequency * count[t].
    counts: (..., V) occurrences of each token among the generated ones, or
    None when no penalty is set. Everything stays lazy: no host sync here.
    """
    if params.logit_bias:
        ids = mx.array(list(params.logit_bias.keys()))
        bias = mx.array(list(params.logit_bias.values()), dtype=logits.dtype)
        logits = logits.at[..., ids].add(bias)
    if counts is not None and has_penalties(params):
        penalty = params.presence_penalty * (counts > 0) + params.frequency_penalty * counts
        logits = logits - penalty.astype(logits.dtype)
    return logits


def token_logprobs(logits: mx.array, counts: mx.array | None, params: SamplingParams) -> mx.array:
    """Reported log-probabilities for logits rows (..., V): the scores' log-softmax."""
    return log_softmax(token_scores(logits, counts, params))


def reported(logprobs: mx.array, params: SamplingParams) -> list[mx.array]:
    """What a step evaluates beside its choice: the logprob rows only when the request
    reports them (otherwise they stay an unevaluated graph, never computed)."""
    return [] if params.logprobs is None else [logprobs]


def log_softmax(logits: mx.array) -> mx.array:
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


def sampling_logprobs(logprobs: mx.array, params: SamplingParams) -> mx.array:
    """Log-probabilities of the distribution a token is actually drawn from.

    Temperature scales the reported logprobs (a shift of the logits); top_p
    keeps the smallest set of
    tokens whose mass reaches top_p (the boundary token included) and
    renormalises. Only meaningful for temperature > 0.
    """
    logprobs = log_softmax(logprobs / params.temperature)
    if 0.0 < params.top_p < 1.0:
        order = mx.argsort(-logprobs, axis=-1)
        sorted_probs = mx.exp(mx.take_along_axis(logprobs, order, axis=-1))
        mass_before = mx.cumsum(sorted_probs, axis=-1) - sorted_probs
        keep_sorted = mass_before < params.top_p
        keep = mx.put_along_axis(mx.zeros_like(keep_sorted), order, keep_sorted, axis=-1)
        logprobs = log_softmax(mx.where(keep, logprobs, -mx.inf))
    return logprobs


class TokenChooser:
    """Chooses tokens for one request; owns its random key so a seed fixes the output."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        seed = params.seed if params.seed is not None else int.from_bytes(os.urandom(4), "little")
        self._key = mx.random.key(seed)

    @property
    def key(self) -> mx.array:
        """Where the seeded stream stands; assign it back to replay from there."""
        return self._key

    @key.setter
    def key(self, key: mx.array) -> None:
        self._key = key

    def next_key(self) -> mx.array:
        self._key, sub = mx.random.split(self._key)
        return sub

    def choose(self, scores: mx.array) -> mx.array:
        """scores: (V,) from token_scores, or (n, V) rows when greedy.
        Returns the token array (lazy): a scalar, or (n,) for rows."""
        if self.params.greedy:
            return mx.argmax(scores, axis=-1)
        logprobs = sampling_logprobs(log_softmax(scores), self.params)
        return mx.random.categorical(logprobs, key=self.next_key())

    def uniform(self) -> float:
        """A seeded U[0, 1) draw, for speculative acceptance tests."""
        return mx.random.uniform(key=self.next_key()).item()


def top_alternatives(logprobs: mx.array, n: int) -> tuple[mx.array, mx.array]:
    """The n most likely tokens of each (..., V) logprob row, best first: (ids, values), lazy."""
    ids = mx.argsort(-logprobs, axis=-1)[..., :n]
    return ids, mx.take_along_axis(logprobs, ids, axis=-1)
