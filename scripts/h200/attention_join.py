"""The verify's attention chunks joined along the row axis: fewer ops, one copy more?

drafter/attention.py's `chunked_attention` joins its chunks' outputs row-major (a
transpose of each, a concatenation, a transpose back: 5 ops a layer) so that mlx-lm's
`transpose(0, 2, 1, 3).reshape(B, N, -1)` reads them without a copy. Arm "rows" joins
them head-major instead (one concatenation, 4 ops fewer a layer, 120 a width-8 verify),
and that reshape then copies the block once a layer. Which is cheaper on the GPU host?

1. Exactness: the 12 held-out prompts decoded greedily (128 tokens) at width 8 under
   "rows", equal to classic decode.
2. Round by round (`ab.alternate_rounds`, RUNS runs): "before" and "rows".
argv: runs (default 10). Prints JSON lines and the rounds' lines."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial

import mlx.core as mx
from ab import alternate_rounds, decodes_as_classic, width8_engine

from drafter import attention

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
BEFORE = attention.chunked_attention


def rows_joined(queries: mx.array, keys: mx.array, values: mx.array, scale: float) -> mx.array:
    """`chunked_attention` with the chunks joined along the row axis (head-major)."""
    outs = attention.vector_chunks(queries, keys, values, scale)
    return outs[0] if len(outs) == 1 else mx.concatenate(outs, axis=2)


ARMS = {"before": BEFORE, "rows": rows_joined}


def use(arm: str) -> None:
    # dispatch looks the name up per call; since session 38 causal_block is the one-launch
    # path (drafter/vector_rows.py), so each arm replaces it whole
    attention.causal_block = ARMS[arm]


engine = width8_engine()
exact = decodes_as_classic(engine, use, "rows")
if exact:
    arms: dict[str, Callable[[], None]] = {arm: partial(use, arm) for arm in ARMS}
    for run in range(RUNS):
        print(f"rounds run {run}", flush=True)
        alternate_rounds(engine, arms, 8)
use("before")
