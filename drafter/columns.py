"""The tied LM head on CPU as a product with a contiguous (H, V) copy of the embedding.

A tied head computes `x @ embedding.T` over the (V, H) embedding: 49,152 x 576 for
the default target, the largest product of every forward. MLX's CPU backend hands
that to `cblas_sgemm` with the second operand transposed. Debian's OpenBLAS 0.3.21
multiplies a few rows by a contiguous (H, V) matrix in half to two thirds of the time
(10.7 against 22.1 ms at one row, 19.3 against 30.2 at four), and greedy text was
unchanged (docs/benchmark_results/cpu-draft-head-layout.md; the draft head's rows gave
scores equal bit for bit). So the head keeps its own
transposed copy, made on first use, and multiplies by that. The embedding lookup
still reads the (V, H) rows.

The cost is memory: one more copy of the embedding (113 MB in float32 for the
default target). The swap is by class, as drafter/rowwise.py does: mlx-lm's model
code calls `embed_tokens.as_linear` and gets this one. Only plain float
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


def set_column_head(model: nn.Module, on: bool) -> int:
    """Swap `model`'s plain Embedding layers to ColumnsEmbedding (on) or back (off,
    dropping the copy); returns how many modules changed class."""
    source, target = (nn.Embedding, ColumnsEmbedding) if on else (ColumnsEmbedding, nn.Embedding)
    changed = 0
    for module in model.modules():
        if type(module) is source:
            module.__class__ = target
            module.__dict__.pop("_columns", None)
            changed += 1
    return changed
