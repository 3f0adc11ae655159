"""One-row products as two-row ones, where the BLAS multiplies two rows faster than one.

A classic decode step runs every linear layer, and the tied LM head, over one row.
Intel MKL (strict mode, as draftwise runs it: server/blas.py) takes a slower path for
a one-row product than for a two-row one on an AMD EPYC, so each product carries a
second row of zeros there (docs/benchmark_results/cpu-amd-padded-step.md).
A row's product does not depend on the other rows beside it, so the padded row is
computed and dropped.

The padding changes which kernel rounds a classic row, not what it computes: under
this BLAS a verify row already differs from a classic one in the last bits, and the
startup exactness probe compares the two paths as served.

The swap is by class (drafter/linear.py): mlx-lm's model code and the weights
are untouched. Layers with a bias keep their class. The tied head multiplies by the
embedding as it is laid out (no contiguous copy, drafter/columns.py): padded, that is
the faster of the two under MKL there, and it saves the copy's memory. An Intel CPU
under MKL is not measured padded, so it keeps the column head (drafter/kernels.py).
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn


def padded_product(x: mx.array, weight: mx.array) -> mx.array:
    """x @ weight.T; a single row goes in beside a row of zeros and comes out alone.

    x: (..., K) with any leading shape; weight: (N, K). Only float32 products pad: they
    are the BLAS's; MLX multiplies other dtypes on CPU with its own kernel, where a
    second row would only double the work."""
    *lead, k = x.shape
    if weight.dtype != mx.float32 or any(size != 1 for size in lead):
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
