"""The drafter's one-request forward in compiled stages (a GPU's default).

A GPU round is host work: each op of a forward costs its Python call before the
device sees it (on an H100, building a verify in Python was 38-41% of it,
docs/benchmark_results/h100-compiled-ffn.md). The drafter's forward is the same
kind of work: its five layers took 1.38 ms of a 6.34 ms width-8 round on a fast
H100 (h100-fewer-nodes.md), 0.28 ms a layer against the verify's 0.17, for about
forty Python ops a layer. `mx.compile` traces a function once per input shape and
replays the traced graph from C++ after that.

What cannot be traced is the cache: its offset is a Python int and its keys grow
every round. So the forward is cut at the caches. Stage i finishes layer i - 1
(its output projection, residual and feed-forward block) and starts layer i (its
norm, the block's queries, the keys and values of [new context; block]); between
two stages, Python writes those keys and values into layer i's cache, reads the
cache back and attends (DFlashDraftModel's own `store` and `attend`). The first
stage also embeds the block and projects the new context rows; the last one norms
the block and scores it with the draft head.

Positions go in as one array, not as ints, so a stage's trace depends only on
shapes: the block's width and how many new context rows a round brings (0 after
the prompt's ingest, else 1 to width + 1), a few traces per width (`warm`, at the
server's warm-up). The stages run DFlashDraftModel's own methods in its order, so
the ops are the same; drafts only choose what the target verifies, so even a
rounding difference here could move acceptance, never a served token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx
import mlx.nn as nn

Stage = Callable[..., list[mx.array]]


class CompiledDraft:
    """One request's draft forward through compiled stages (see the module docstring).

    embed: the target's embedding; head: the draft head (the drafter's `head`)."""

    def __init__(self, model: Any, embed: nn.Module, head: Callable[[mx.array], mx.array]) -> None:
        self.model = model
        self.embed = embed
        self.head = head
        depth = len(model.layers)
        self.stages: list[Stage] = [mx.compile(self.first)]
        self.stages += [mx.compile(self.between(i)) for i in range(1, depth)]
        self.stages.append(mx.compile(self.last))

    def __call__(self, tokens: mx.array, features: mx.array, caches: list[Any]) -> mx.array:
        """The draft head's scores (1, L - 1, N) for the block `tokens` (1, L) after the
        new context rows `features` (1, S, n_taps * H); writes the context into `caches`."""
        L = tokens.shape[1]
        start = caches[0].offset  # every layer's cache holds the same rows
        positions = mx.array([start, start + features.shape[1]])  # keys from, queries from
        h, queries, keys, values, *context = self.stages[0](tokens, features, positions)
        for i, layer in enumerate(self.model.layers):
            attn = layer.self_attn
            fetched, fetched_values, mask = attn.store(keys, values, caches[i], L)
            attended = attn.attend(queries, fetched, fetched_values, mask, caches[i])
            if i + 1 < len(self.model.layers):
                h, queries, keys, values = self.stages[i + 1](h, attended, positions, *context)
        return self.stages[-1](h, attended)[0]

    def start(
        self, layer: nn.Module, h: mx.array, context: list[mx.array], positions: mx.array
    ) -> list[mx.array]:
        """Layer `layer` up to its cache: the block's queries, and the keys and values of
        the new context rows (if any) and the block."""
        attn, rope = layer.self_attn, self.model.rope
        x = layer.input_layernorm(h)
        rows = mx.concatenate([context[0], x], axis=1) if context else x
        keys, values = attn.keys_values(rows, rope, positions[0])
        return [attn.queries(x, rope, positions[1]), keys, values]

    def first(self, tokens: mx.array, features: mx.array, positions: mx.array) -> list[mx.array]:
        h = self.embed(tokens)
        context = [self.model.context(features)] if features.shape[1] > 0 else []
        return [h, *self.start(self.model.layers[0], h, context, positions), *context]

    def between(self, i: int) -> Stage:
        def stage(
            h: mx.array, attended: mx.array, positions: mx.array, *context: mx.array
        ) -> list[mx.array]:
            before = self.model.layers[i - 1]
            h = before.finish(h, before.self_attn.output(attended))
            return [h, *self.start(self.model.layers[i], h, list(context), positions)]

        return stage

    def last(self, h: mx.array, attended: mx.array) -> list[mx.array]:
        layer = self.model.layers[-1]
        h = self.model.norm(layer.finish(h, layer.self_attn.output(attended)))
        return [self.head(h[:, 1:])]
