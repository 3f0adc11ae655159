"""What both decode paths share: tokens and their logprobs, per-request counters, the
chunked prefill, and the drafter protocol. `engine.py` (classic decode) and
`speculative.py` (the round loop) both build on it, so neither imports the other's
internals.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import mlx.core as mx
import mlx.nn as nn

from drafter.capture import Call, hooked_class
from drafter.device import on_cpu
from drafter.sampling import SamplingParams, top_alternatives

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
    # Wall time of the decode steps (rounds) that carried this request, prefill excluded:
    # the model worker's share of its latency (a batch's step counts for each member).
    decode_s: float = 0.0
    # Wall time of its prefill chunks, the first token's choice included.
    prefill_s: float = 0.0

    @property
    def acceptance_length(self) -> float:
        """Mean tokens emitted per round (accepted drafts + the bonus token)."""
        return (self.accepted + self.rounds) / self.rounds if self.rounds else 0.0


def prefill(model: nn.Module, prompt: list[int], cache: list[Any]) -> mx.array:
    """Run the prompt through the target; return the last row's logits (V,)."""
    return prefill_tapped(model, prompt, cache, None)[0]


def prefill_tapped(
    model: nn.Module, prompt: list[int], cache: list[Any], capture: Any
) -> tuple[mx.array, list[mx.array]]:
    """The whole prefill at once: see `prefill_steps`."""
    return drain(prefill_steps(model, prompt, cache, capture))


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
    L x S square for a chunk of L rows after S - L cached ones) and an exp per score,
    so shorter chunks make a long prefill cheaper: on the AMD VM a 1,000-token prefill
    took 19% and 24% less at 256 rows than at 2,048 (two runs) and a 700-token one 23%
    and 8% less, with no change under ~300 tokens
    (docs/benchmark_results/cpu-amd-prefill-polyexp.md); 256
    rows still keep MKL's products at full rate. Where prompt-cache hits restore whole
    chunks (drafter/prompt_cache.py) it is also their grain. A GPU's fused attention
    computes no more than the causal half either way and runs bigger chunks better."""
    return CPU_PREFILL_STEP if on_cpu() else PREFILL_STEP


def prefill_steps(
    model: nn.Module, prompt: list[int], cache: list[Any], capture: Any
) -> Generator[None, None, tuple[mx.array, list[mx.array]]]:
    """Run the prompt through the target in prefill_step() chunks, each evaluated (so
    memory stays bounded) and followed by a yield (so a batch decodes between them);
    return the last row's logits (V,) and, with a `capture` (drafter/capture.py), each
    chunk's tapped features."""
    tokens = mx.array(prompt)
    features: list[mx.array] = []
    step = prefill_step()
    while tokens.size > step:
        model(tokens[:step][None], cache=cache)
        features += [capture.features()] if capture is not None else []
        mx.eval([c.state for c in cache], features[-1:])
        tokens = tokens[step:]
        yield
    with last_row_head(model):
        logits = model(tokens[None], cache=cache)[0, -1]
    features += [capture.features()] if capture is not None else []
    return logits, features


def last_row_only(original: Call) -> Call:
    """A norm call that normalises only its input's last row."""

    def __call__(self: nn.Module, x: mx.array, *args: Any, **kwargs: Any) -> Any:
        return original(self, x[..., -1:, :], *args, **kwargs)

    return __call__


def last_row_class(cls: type) -> type:
    return hooked_class(cls, "LastRow", last_row_only)


@contextmanager
def last_row_head(model: nn.Module) -> Iterator[None]:
    """Within the block, `model`'s forwards compute the LM head for the last row only.

    A prefill needs the logits of its last row alone, but an mlx-lm model's forward
    computes them for every row: (L, V) logits, on this project's CPU an eighth of a
    300-token prefill and, for a 150k-vocabulary target and a 2048-row chunk, 1.2 GB in
    float32. mlx-lm's models apply their final norm (`model.model.norm`) just before the
    head, and both act row by row, so the norm's class is swapped, as drafter/capture.py
    swaps layers', for one that passes on only the last row. A model without that norm
    keeps the full head. The tapped layers' outputs (drafter/capture.py) are untouched."""
    inner = getattr(model, "model", None)
    norm = getattr(inner, "norm", None)
    if not isinstance(norm, nn.Module):
        yield
        return
    plain = type(norm)
    norm.__class__ = last_row_class(plain)
    try:
        yield
    finally:
        norm.__class__ = plain


def make_token(token: int, logprobs: mx.array, params: SamplingParams) -> Token:
    """One token and its reported logprobs; logprobs: the (V,) row it was chosen from."""
    return make_tokens([token], logprobs[None], params)[0]


def make_tokens(tokens: list[int], logprobs: mx.array, params: SamplingParams) -> list[Token]:
    """Tokens with their reported logprobs, in one host sync; logprobs: (n, V), row i
    the one tokens[i] was chosen from."""
    if params.logprobs is None:
        return [Token(token, 0.0) for token in tokens]
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
    distribution q from `logits()`. Built every round, that row cost a CPU round 1.9 ms
    of the default pair's 49,152-token vocabulary (the fill, the scatter and an argmax
    three times as wide) against 0.08 ms for the argmax over 16,384 scores."""

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
    """What the round loop needs of a drafter; `drafter/dflash.py: DFlashDrafter` is the
    one the server loads."""

    @property
    def target_layer_ids(self) -> list[int]: ...

    @property
    def head_tokens(self) -> int: ...

    @property
    def max_width(self) -> int: ...

    def make_cache(self, attention: str = "exact") -> list[Any]: ...

    def set_linear(self, mode: str) -> None: ...

    def ingest(self, features: mx.array, cache: list[Any]) -> None: ...

    def draft_scores(
        self, anchor: int, features: mx.array, cache: list[Any], width: int
    ) -> DraftScores: ...

    def draft_scores_batch(
        self, anchors: list[int], features: list[mx.array], caches: list[list[Any]], width: int
    ) -> DraftScores: ...
