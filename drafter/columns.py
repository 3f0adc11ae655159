"""The tied LM head on CPU as a product with a contiguous (H, V) copy of the embedding.

A tied head computes `x @ embedding.T` over the (V, H) embedding: 49,152 x 576 for
the default target, the largest product of every forward. MLX's CPU backend hands
that to `cblas_sgemm` with the second operand transposed. OpenBLAS multiplies a few
rows by a contiguous (H, V) matrix in about half the time, with greedy text unchanged
(docs/benchmark_results/cpu-draft-head-layout.md). So the head keeps its own
transposed copy, made on first use, and multiplies by that. The embedding lookup
still reads the (V, H) rows. Under MKL on an AMD CPU the padded layout
(drafter/padded.py) serves instead: it is faster there without the copy.

The cost is memory: one more copy of the embedding (113 MB in float32 for the
default target). The swap is by class (drafter/linear.py): mlx-lm's model code
calls `embed_tokens.as_linear` and gets this one. Only plain float
embeddings change class; quantized ones keep MLX's quantized kernel.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn


class ColumnsEmbedding(nn.Embedding):
    """nn.Embedding whose tied LM head multiplies by a contiguous (H, V) copy."""

    def as_linear(self, x: mx.array) -> mx.array:
        columns = self.__dict__.get("_columns")
        if columns is None:
            columns = mx.contiguous(self.weight.T)
            self.__dict__["_columns"] = columns  # not a parameter: never saved or loaded
        return x @ columns


SWAPS: dict[type, type] = {nn.Embedding: ColumnsEmbedding}
