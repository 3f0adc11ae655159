"""The generation engine: one target (and optionally a drafter) behind one API.

It holds what a request needs besides its own state: the target run through its
`Forward`, the tokenizer, the drafter and resolved width, the prompt cache and the
grammars. The server's scheduler decodes through drafter/batch.py; `Engine.generate`
drives that same decoder for one request (the probe, the warm-up, tooling, tests) and
yields the tokens of each step, so a caller can stop after any of them.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import replace
from typing import Any, Literal

import mlx.core as mx
import mlx.nn as nn

from drafter.attention import make_cache
from drafter.batch import BatchDecoder, run_alone
from drafter.decoding import (
    Drafter,
    GenerationStats,
    Token,
    drain,
    make_tokens,
    prefill_steps,
)
from drafter.dflash import target_embedding
from drafter.forward import Forward
from drafter.grammar import Constraint, Grammars
from drafter.kernels import backend_bundle, kernels_for
from drafter.prompt_cache import PromptCache
from drafter.sampling import (
    SamplingParams,
    log_softmax,
)


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
        # How the target computes: the backend's bundle (drafter/kernels.py), each mode
        # asked for by hand (the lab, tests) in its place.
        self.bundle = backend_bundle()
        asked = {"attention": attention, "linear": linear, "activation": activation}
        kernels = replace(
            kernels_for(self.bundle, drafter is not None),
            **{mode: value for mode, value in asked.items() if value is not None},
        )
        taps = None if drafter is None else drafter.target_layer_ids
        self.forward = Forward(model, taps, kernels)
        if drafter is not None:
            drafter.set_linear(kernels.linear)
        self.prompt_cache: PromptCache | None = None  # set by the loader once probed
        self._grammars: Grammars | None = None
        # Size each request's KV buffers at its prefill (drafter/attention.py: reserve);
        # off: mlx-lm's growth by 256 rows mid-request (`draftwise profile --kv grown`).
        self.reserve_kv = True

    def use(self, **modes: str) -> None:
        """Run with other kernel modes from now on (`draftwise profile`, tests):
        `attention=`, `linear=`, `activation=`."""
        kernels = replace(self.forward.kernels, **modes)
        self.forward.use(kernels)
        if self.drafter is not None:
            self.drafter.set_linear(kernels.linear)

    @property
    def attention(self) -> str:
        return self.forward.kernels.attention

    @property
    def linear(self) -> str:
        return self.forward.kernels.linear

    @property
    def activation(self) -> str:
        return self.forward.kernels.activation

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
        """Yield the tokens of each step through the served decoder (drafter/batch.py),
        as a batch of one; stops after max_tokens or an EOS token (yielded). With
        `ignore_eos`, EOS is an ordinary token and only max_tokens stops.

        `width`: rows per step, up to the drafter's block; None: classic decode;
        "loaded": the width resolved at startup (classic when there is none)."""
        if width == "loaded":
            width = self.block_size if self.speculative else None
        decoder = BatchDecoder(self, width or 1)
        sequence = decoder.start(prompt, max_tokens, params, stats or GenerationStats(), ignore_eos)
        yield from run_alone(decoder, sequence, width or 1)

    def score(self, prompt: list[int], top_n: int) -> list[Token | None]:
        """Logprobs of each prompt token given its prefix (echo); the first has none."""
        cache = make_cache(self.model, "exact")
        rows = drain(prefill_steps(self.forward, prompt, cache, every_row=row_logprobs)).rows
        assert rows is not None
        scored: list[Token | None] = [None]
        scored += make_tokens(prompt[1:], rows[:-1], SamplingParams(logprobs=top_n))
        return scored

    def grammars(self) -> Grammars:
        """The target's tokenizer for grammars (made on first use: about a second) and
        every grammar compiled so far."""
        if self._grammars is None:
            hf = getattr(self.tokenizer, "_tokenizer", self.tokenizer)
            self._grammars = Grammars(hf, self.vocab_size, sorted(self.eos_ids))
        return self._grammars

    def constraint(self, grammar: str) -> Constraint:
        return self.grammars().constraint(grammar)

    @property
    def vocab_size(self) -> int:
        return target_vocab(self.model)


def target_vocab(model: nn.Module) -> int:
    """The target's vocabulary: the rows of its token embedding."""
    return int(target_embedding(model).weight.shape[0])


def row_logprobs(logits: mx.array) -> mx.array:
    return log_softmax(logits.astype(mx.float32))
