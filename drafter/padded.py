"""One-row products as two-row ones, where the BLAS multiplies two rows faster than one.

A classic decode step runs every linear layer, and the tied LM head, over one row.
Intel MKL (strict mode, as draftwise runs it: server/blas.py) takes a slower path for
a one-row product than for a two-row one on the AMD EPYC we measured: SmolLM2-135M's
feed-forward layers over 30 layers cost 23.0 ms at one row and 13.3 ms at two, the
whole one-row forward 46 ms against 37-39 ms when each product carries a second row
of zeros (docs/benchmark_results/cpu-amd-padded-step.md). A row's result never depends
on the other rows of a product, so the padded row is computed and dropped.

The padding changes which kernel rounds a classic row, not what it computes: the
one-row logits move by at most 3e-5 (float32), below the 4e-5 to 8e-5 by which a
verify row already differs from a classic one under this BLAS, and the startup
exactness probe still compares the two paths as served.

The swap is by class, as drafter/rowwise.py does: mlx-lm's model code and the weights
are untouched. Layers with a bias keep their class. The tied head multiplies by the
embedding as it is laid out (no contiguous copy, drafter/columns.py): padded, that is
the faster of the two under MKL here (3.4 against 5.3 ms at one row), and it saves
the copy's 113 MB.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn


def padded_product(x: mx.array, weight: mx.array) -> mx.array:
    """x @ weight.T; a single row goes in beside a row of zeros and comes out alone.

    x: (..., K) with any leading shape; weight: (N, K)."""
    *lead, k = x.shape
    if any(size != 1 for size in lead):
        return x @ weight.T
    two_rows = mx.concatenate([x.reshape(1, k), mx.zeros((1, k), dtype=x.dtype)])
    return (two_rows @ weight.T)[:1].reshape(*lead, weight.shape[0])


class PaddedLinear(nn.Linear):
    """nn.Linear (bias-free) whose one-row calls are two-row products."""

    def __call__(self, x: mx.array) -> mx.array:
        return padded_product(x, self["weight"])


class PaddedEmbedding(nn.Embedding):
    """nn.Embedding whose tied LM head (`as_linear`) pads a single row."""

    def as_linear(self, x: mx.array) -> mx.array:
        return padded_product(x, self["weight"])


SWAPS: dict[type, type] = {nn.Linear: PaddedLinear, nn.Embedding: PaddedEmbedding}
