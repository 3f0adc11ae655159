"""The generation engine: one target (and optionally a drafter) behind one API.

The server's model worker is the only caller. `Engine.generate` yields the
tokens of each decoding round (classic decode: one token per round), so the
caller can stop after any token (stop strings, cancellation) and both paths
emit exactly the same token stream for the same greedy request.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any, Literal

import mlx.core as mx
import mlx.nn as nn

from drafter.activation import choose_activation, set_activation
from drafter.attention import choose_attention, make_cache, reserve, route_attention
from drafter.decoding import (
    Drafter,
    GenerationStats,
    Token,
    make_token,
    make_tokens,
    one_hot,
    prefill,
    prefill_step,
)
from drafter.diagnostics import ATTENTION_MODES
from drafter.linear import choose_linear, set_linear
from drafter.prompt_cache import PromptCache
from drafter.sampling import (
    SamplingParams,
    TokenChooser,
    has_penalties,
    log_softmax,
    reported,
    token_scores,
)
from drafter.speculative import speculative_generate


class Engine:
    """Owns the loaded target, tokenizer and optional drafter; not thread-safe."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        *,
        model_id: str,
        context_length: int,
        drafter: Drafter | None = None,
        block_size: int | None = None,
        attention: str | None = None,
        linear: str | None = None,
        activation: str | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.model_id = model_id
        self.context_length = context_length
        self.drafter = drafter
        self.block_size = block_size
        # How multi-row queries attend (drafter/attention.py); None: choose_attention().
        self.attention = choose_attention() if attention is None else attention
        # The target's feed-forward SwiGLU (drafter/activation.py); None: choose_activation(),
        # which weighs whether this engine speculates. Before the layout: its setter
        # re-applies the activation.
        self.activation = (
            choose_activation(drafter is not None) if activation is None else activation
        )
        # How the products run (drafter/linear.py); None: choose_linear().
        self.linear = choose_linear() if linear is None else linear
        self.prompt_cache: PromptCache | None = None  # set by the loader once probed
        # Size each request's KV buffers at its prefill (drafter/attention.py: reserve);
        # off: mlx-lm's growth by 256 rows mid-request (`draftwise profile --kv grown`).
        self.reserve_kv = True

    @property
    def attention(self) -> str:
        return self._attention

    @attention.setter
    def attention(self, mode: str) -> None:
        if mode not in ATTENTION_MODES:
            raise ValueError(f"attention {mode!r} is none of {ATTENTION_MODES}")
        if mode in ("vector", "polyexp"):
            route_attention(self.model)
        self._attention = mode

    @property
    def stable_attention(self) -> bool:
        return self.attention == "stable"

    @property
    def linear(self) -> str:
        return self._linear

    @linear.setter
    def linear(self, mode: str) -> None:
        """Put the target's and the drafter's layers in the `mode` layout (drafter/linear.py)."""
        set_linear(self.model, mode)
        if self.drafter is not None:
            self.drafter.set_linear(mode)
        self._linear = mode
        self.activation = self.activation  # compiled feed-forward blocks traced the old layout

    @property
    def activation(self) -> str:
        return self._activation

    @activation.setter
    def activation(self, mode: str) -> None:
        """The target's feed-forward layers with the `mode` SwiGLU (drafter/activation.py)."""
        set_activation(self.model, mode)
        self._activation = mode

    def make_cache(self) -> list[Any]:
        return make_cache(self.model, self.attention)

    def start_cache(
        self, prompt: list[int], stats: GenerationStats, features: bool = False
    ) -> tuple[list[Any], int, mx.array | None]:
        """The cache to prefill `prompt` into, from the prompt cache's longest usable
        prefix when there is one: (cache, prompt tokens already in it, their features)."""
        restored = None if self.prompt_cache is None else self.prompt_cache.fetch(prompt, features)
        if restored is None:
            return self.make_cache(), 0, None
        stats.cached_tokens = restored.tokens
        return restored.cache, restored.tokens, restored.features

    def remember(self, prompt: list[int], cache: list[Any], features: mx.array | None) -> None:
        """Offer the state after prefilling `prompt` to the prompt cache."""
        if self.prompt_cache is not None:
            self.prompt_cache.insert(prompt, cache, features)

    @property
    def eos_ids(self) -> set[int]:
        return set(self.tokenizer.eos_token_ids)

    @property
    def speculative(self) -> bool:
        return self.drafter is not None and self.block_size is not None

    def generate(
        self,
        prompt: list[int],
        max_tokens: int,
        params: SamplingParams,
        stats: GenerationStats | None = None,
        ignore_eos: bool = False,
        width: int | None | Literal["loaded"] = "loaded",
    ) -> Generator[list[Token], None, None]:
        """Yield the tokens of each round; stops after max_tokens or an EOS token (yielded).
        With `ignore_eos`, EOS is an ordinary token and only max_tokens stops.

        `width`: draft rows per round, up to the drafter's block; None: classic decode;
        "loaded": the width resolved at startup (classic when there is none)."""
        stats = stats if stats is not None else GenerationStats()
        if width == "loaded":
            width = self.block_size if self.speculative else None
        if width is None:
            yield from self.classic_generate(prompt, max_tokens, params, ignore_eos, stats)
        else:
            yield from speculative_generate(
                self, prompt, max_tokens, params, stats, ignore_eos, width
            )

    def classic_generate(
        self,
        prompt: list[int],
        max_tokens: int,
        params: SamplingParams,
        ignore_eos: bool = False,
        stats: GenerationStats | None = None,
    ) -> Iterator[list[Token]]:
        """Plain autoregressive decode, pipelined like mlx-lm's generate_step:
        the next step's graph is queued before the current token is read back."""
        if max_tokens <= 0:
            return
        cache, start, _ = self.start_cache(prompt, stats or GenerationStats())
        chooser = TokenChooser(params)
        vocab = self.vocab_size
        eos = set() if ignore_eos else self.eos_ids
        counts = mx.zeros((vocab,), dtype=mx.float32) if has_penalties(params) else None

        def step(logits: mx.array) -> tuple[mx.array, mx.array]:
            scores = token_scores(logits, counts, params)
            return chooser.choose(scores), log_softmax(scores)

        logits = prefill(self.model, prompt[start:], cache)
        self.remember(prompt, cache, None)
        if self.reserve_kv:  # as a speculative request does
            reserve(cache, len(prompt), max_tokens)
        y, logprobs = step(logits)
        mx.async_eval(y, *reported(logprobs, params))
        for n in range(max_tokens):
            if n + 1 < max_tokens:
                if counts is not None:
                    counts = counts + one_hot(y, vocab)
                next_y, next_logprobs = step(self.model(y.reshape(1, 1), cache=cache)[0, -1])
                mx.async_eval(next_y, *reported(next_logprobs, params))
            token = y.item()
            yield [make_token(token, logprobs, params)]
            if token in eos:
                return
            if n + 1 < max_tokens:
                y, logprobs = next_y, next_logprobs

    def score(self, prompt: list[int], top_n: int) -> list[Token | None]:
        """Logprobs of each prompt token given its prefix (echo); the first has none."""
        cache = make_cache(self.model, "exact")
        rows = []
        tokens = mx.array(prompt)
        step = prefill_step()
        for start in range(0, len(prompt), step):
            logits = self.model(tokens[start : start + step][None], cache=cache)[0]
            rows.append(log_softmax(logits.astype(mx.float32)))
        logprobs = mx.concatenate(rows, axis=0)
        scored: list[Token | None] = [None]
        scored += make_tokens(prompt[1:], logprobs[:-1], SamplingParams(logprobs=top_n))
        return scored

    @property
    def vocab_size(self) -> int:
        return self.model.model.embed_tokens.weight.shape[0]
