"""H200: do fewer graph nodes in the verify make the round cheaper?

Arm "before" is bc2bdd0: each rowwise product makes its own row view of its input and
reshapes its output, and the verify attention slices its query rows chunk by chunk
(`before/rowwise_bc2bdd0.py`, `before/attention_bc2bdd0.py`, written with
`git show bc2bdd0:drafter/X.py`). Arm "after" is this tree: q/k/v and gate/up share one
row view of their input, q/k/v hand back their product unreshaped to mlx-lm's own
reshape into heads, and one split cuts the query chunks: 11 nodes fewer a target layer
(330 a verify forward, docs/benchmark_results/cpu-intel-verify-graph-nodes.md). Both
compute the same values. argv: n (default 10), tokens
(default 128)."""

from __future__ import annotations

import sys
from pathlib import Path

import mlx.core as mx
from ab import alternate, module_from, width8_engine

import drafter.attention as attention
import drafter.rowwise as rowwise

old_rowwise = module_from(Path("before/rowwise_bc2bdd0.py"), "before_rowwise")
old_attention = module_from(Path("before/attention_bc2bdd0.py"), "before_attention")
new_project, new_chunked = rowwise.project, attention.chunked_attention


def old_project(
    x: mx.array,
    weight: mx.array,
    kept: tuple[mx.array, mx.array] | None = None,
    heads: bool = False,
) -> mx.array:
    return old_rowwise.project(x, weight, kept)


def before() -> None:
    rowwise.project = old_project
    attention.causal_block = old_attention.chunked_attention  # dispatch's name for it


def after() -> None:
    rowwise.project = new_project
    attention.causal_block = new_chunked


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    alternate(width8_engine(), {"before": before, "after": after}, n, tokens)
