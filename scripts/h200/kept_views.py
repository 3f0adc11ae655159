"""H200: do kept weight views and unsliced last chunks make the verify cheaper?

Arm "before" is 9def21a: every rowwise product makes its weight's two transposed views
anew (drafter/rowwise.py: `operands` then returns nothing kept), and every chunk of the
verify attention slices its keys (`before/attention_9def21a.py`, written with
`git show 9def21a:drafter/attention.py`). Arm "after" is this tree. Both compute the
same values; the change is 2 graph nodes fewer per product (211 a verify forward) and
2 per layer in the attention. argv: n (default 10), tokens (default 128)."""

from __future__ import annotations

import sys
from pathlib import Path

from ab import alternate, module_from, width8_engine

import drafter.attention as attention
import drafter.rowwise as rowwise

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10
TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 128

old_attention = module_from(Path("before/attention_9def21a.py"), "before_attention")
kept_operands = rowwise.operands


def before() -> None:
    attention.causal_block = old_attention.chunked_attention  # dispatch's name for it
    rowwise.operands = lambda module: None  # type: ignore[assignment,return-value]


def after() -> None:
    attention.causal_block = kept_chunked
    rowwise.operands = kept_operands


kept_chunked = attention.chunked_attention
alternate(width8_engine(), {"before": before, "after": after}, N, TOKENS)
