"""What the decoder's parts share: tokens and their logprobs, per-request counters, the
one chunked prefill, and the drafter protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import mlx.core as mx

from drafter.device import on_cpu
from drafter.sampling import SamplingParams, top_alternatives

if TYPE_CHECKING:
    from drafter.forward import Forward

# Rows a prefill chunk: see prefill_step.
PREFILL_STEP = 2048
CPU_PREFILL_STEP = 256
Result = TypeVar("Result")


@dataclass
class Token:
    id: int
    logprob: float
    top_logprobs: dict[int, float] | None = None


@dataclass
class GenerationStats:
    """Per-request counters: speculative ones (all zero for classic decode) and the
    prompt tokens the prompt cache served."""

    block_size: int | None = None
    cached_tokens: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    widths: dict[int, int] = field(default_factory=dict)  # speculative rounds per width
    # Wall time of the decode steps (rounds) that carried this request, prefill excluded:
    # the model worker's share of its latency (a batch's step counts for each member).
    decode_s: float = 0.0
    # Wall time of its prefill chunks, the first token's choice included.
    prefill_s: float = 0.0
    # Host time computing its grammar's token masks (structured outputs), and how many rows.
    mask_s: float = 0.0
    masked_rows: int = 0

    @property
    def acceptance_length(self) -> float:
        """Mean tokens emitted per round (accepted drafts + the bonus token)."""
        return (self.accepted + self.rounds) / self.rounds if self.rounds else 0.0


@dataclass
class Prefilled:
    """What a prefill leaves besides the cache: the last row's logits (V,), each
    chunk's tapped features (with taps) and, with `every_row`, every row's scores."""

    logits: mx.array
    features: list[mx.array]
    rows: mx.array | None = None


def prefill(forward: Forward, prompt: list[int], cache: list[Any]) -> mx.array:
    """Run the prompt through the target; return the last row's logits (V,)."""
    return drain(prefill_steps(forward, prompt, cache)).logits


def drain(steps: Generator[None, None, Result]) -> Result:
    """Run a stepwise generator to its end; its return value."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def prefill_step() -> int:
    """Rows a prefill chunk: CPU_PREFILL_STEP on the CPU, PREFILL_STEP elsewhere.

    MLX's CPU attention computes each query's scores over every key of its forward (an
    L x S square for a chunk of L rows after S - L cached ones) and an exp per score, so
    shorter chunks make a long CPU prefill cheaper, while 256 rows still keep the
    products at full rate (cpu-amd-prefill-polyexp.md). Where prompt-cache hits restore
    whole chunks (drafter/prompt_cache.py) it is also their grain. A GPU's fused
    attention computes no more than the causal half either way and runs bigger chunks
    better."""
    return CPU_PREFILL_STEP if on_cpu() else PREFILL_STEP


def prefill_steps(
    forward: Forward,
    prompt: list[int],
    cache: list[Any],
    taps: bool = False,
    every_row: Callable[[mx.array], mx.array] | None = None,
) -> Generator[None, None, Prefilled]:
    """Run the prompt through the target in prefill_step() chunks, each evaluated (so
    memory stays bounded) and followed by a yield (so a batch decodes between them).
    With `every_row`, each chunk's (L, V) logits go through it and are kept (scoring);
    otherwise the last chunk computes its last row's logits alone."""
    tokens = mx.array(prompt)
    features: list[mx.array] = []
    rows: list[mx.array] = []
    step = prefill_step()
    while tokens.size > step:
        logits, tapped = forward(tokens[:step][None], cache, taps=taps)
        features += [] if tapped is None else [tapped]
        rows += [] if every_row is None else [every_row(logits[0])]
        mx.eval([c.state for c in cache], features[-1:], rows[-1:])
        tokens = tokens[step:]
        yield
    logits, tapped = forward(tokens[None], cache, taps=taps, last_row=every_row is None)
    features += [] if tapped is None else [tapped]
    if every_row is None:
        return Prefilled(logits[0, -1], features)
    rows.append(every_row(logits[0]))
    return Prefilled(logits[0, -1], features, mx.concatenate(rows, axis=0))


def make_token(token: int, logprobs: mx.array, params: SamplingParams) -> Token:
    """One token and its reported logprobs; logprobs: the (V,) row it was chosen from."""
    return make_tokens([token], logprobs[None], params)[0]


def make_tokens(
    tokens: list[int], logprobs: mx.array | None, params: SamplingParams
) -> list[Token]:
    """Tokens with their reported logprobs, in one host sync; logprobs: (n, V), row i
    the one tokens[i] was chosen from (None when the request reports none)."""
    if params.logprobs is None:
        return [Token(token, 0.0) for token in tokens]
    assert logprobs is not None, "a request that reports logprobs needs their rows"
    chosen = mx.take_along_axis(logprobs, mx.array(tokens)[:, None], axis=-1)[:, 0]
    if params.logprobs <= 0:
        return [Token(t, lp, {}) for t, lp in zip(tokens, chosen.tolist(), strict=True)]
    top_ids, top_values = top_alternatives(logprobs, params.logprobs)
    mx.eval(chosen, top_ids, top_values)
    return [
        Token(token, logprob, dict(zip(ids, values, strict=True)))
        for token, logprob, ids, values in zip(
            tokens, chosen.tolist(), top_ids.tolist(), top_values.tolist(), strict=True
        )
    ]


def one_hot(token: mx.array, vocab: int) -> mx.array:
    return (mx.arange(vocab) == token).astype(mx.float32)


@dataclass(frozen=True)
class DraftScores:
    """A drafter head's scores for its block rows (lazy): `scores` (..., N) over the
    tokens `ids`, its draft vocabulary, or over the whole vocabulary when `ids` is None.

    A greedy draft is the argmax of the scores looked up in `ids`; the full-vocabulary
    row (-inf off the draft vocabulary) is built only for sampling, which reads the draft
    distribution q from `logits()`: filling and scattering it every round costs more
    than the argmax over the draft vocabulary."""

    scores: mx.array
    ids: mx.array | None = None
    vocab: int = 0  # the whole vocabulary's size, where `ids` is set

    def tokens(self) -> mx.array:
        """The greedy drafts: each row's best-scored token id."""
        best = mx.argmax(self.scores, axis=-1)
        return best if self.ids is None else self.ids[best]

    def logits(self) -> mx.array:
        """Logits over the whole vocabulary, -inf off the draft vocabulary."""
        if self.ids is None:
            return self.scores
        shape = (*self.scores.shape[:-1], self.vocab)
        logits = mx.full(shape, -mx.inf, dtype=self.scores.dtype)
        logits[..., self.ids] = self.scores
        return logits

    def __getitem__(self, index: int) -> DraftScores:
        """Request `index`'s rows of a batched draft."""
        return DraftScores(self.scores[index], self.ids, self.vocab)


class Drafter(Protocol):
    """What the round loop needs of a drafter: `drafter/dflash.py: DFlashDrafter` (reads
    the target's features at `target_layer_ids`), `drafter/ngram.py: NgramDrafter`
    (reads the request's tokens, which `observe` hands it), or `drafter/hybrid.py:
    HybridDrafter` (both)."""

    @property
    def target_layer_ids(self) -> list[int]: ...

    @property
    def head_tokens(self) -> int: ...

    @property
    def max_width(self) -> int: ...

    def make_cache(self, attention: str = "exact") -> list[Any]: ...

    def set_linear(self, mode: str) -> None: ...

    def ingest(self, features: mx.array, cache: list[Any]) -> None: ...

    def observe(self, tokens: list[int], cache: list[Any]) -> None: ...

    def proposes(self, cache: list[Any]) -> bool: ...

    def draft_scores(
        self, anchor: int, features: mx.array, cache: list[Any], width: int
    ) -> DraftScores: ...

    def draft_scores_batch(
        self, anchors: list[int], features: list[mx.array], caches: list[list[Any]], width: int
    ) -> DraftScores: ...
