"""The verify's causal attention in one launch (drafter/vector_rows.py) against the
chunks of at most 3 rows it replaces (drafter/attention.py: chunked_attention).

1. Rows: random blocks (bf16, fp16, fp32; head sizes 64 and 128; grouped heads; keys a
   slice of a longer buffer, queries a transposed view, as in mlx-lm's attention), each
   row of the launch against MLX's own vector kernel called for that row alone over its
   keys, as a classic step calls it: equal bit for bit?
2. Exactness: the 12 held-out prompts decoded greedily (128 tokens) at width 8 with the
   launch, equal to classic decode.
3. Round by round (`ab.alternate_rounds`, RUNS runs): "before" (chunks) and "rows".
argv: runs (default 8). Prints JSON lines and the rounds' lines."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import partial

import mlx.core as mx
from ab import alternate_rounds, decodes_as_classic, width8_engine

from drafter import attention, vector_rows

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 8
ARMS = {"before": attention.chunked_attention, "rows": attention.causal_block}


def use(arm: str) -> None:
    attention.causal_block = ARMS[arm]  # dispatch looks the name up per call


def rows_equal(dtype: mx.Dtype, D: int, rows: int, keys: int) -> bool:
    """One random block through the launch, each row against a one-row vector call."""
    H, H_kv, scale = 9, 3, D**-0.5
    q = mx.random.normal((1, rows, H, D)).astype(dtype).transpose(0, 2, 1, 3)
    buffer_k = mx.random.normal((1, H_kv, keys + 200, D)).astype(dtype)
    buffer_v = mx.random.normal((1, H_kv, keys + 200, D)).astype(dtype)
    k, v = buffer_k[..., :keys, :], buffer_v[..., :keys, :]
    out = vector_rows.causal_rows(q, k, v, scale)
    equal = True
    for i in range(rows):
        end = keys - rows + i + 1
        one = mx.fast.scaled_dot_product_attention(
            q[:, :, i : i + 1], k[..., :end, :], v[..., :end, :], scale=scale
        )
        equal = equal and mx.array_equal(out[:, :, i : i + 1], one).item()
    return bool(equal)


def check_rows() -> bool:
    exact = True
    for dtype in (mx.bfloat16, mx.float16, mx.float32):
        for D in (64, 128):
            for rows, keys in [(2, 9), (3, 40), (4, 100), (8, 257), (8, 1024), (9, 600), (16, 700)]:
                equal = rows_equal(dtype, D, rows, keys)
                exact = exact and equal
                row = {"dtype": str(dtype), "D": D, "rows": rows, "keys": keys, "equal": equal}
                print(json.dumps(row), flush=True)
    print(json.dumps({"rows_exact": exact}), flush=True)
    return exact


mx.random.seed(0)
engine = width8_engine()  # its loader sets MLX_CUDA_USE_CUDNN_SDPA=0 before any attention
if check_rows() and decodes_as_classic(engine, use, "rows"):
    arms: dict[str, Callable[[], None]] = {arm: partial(use, arm) for arm in ARMS}
    for run in range(RUNS):
        print(f"rounds run {run}", flush=True)
        alternate_rounds(engine, arms, 8)
use("rows")
