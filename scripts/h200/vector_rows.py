"""The verify's causal attention in one launch (drafter/vector_rows.py) against the
chunks of at most 3 rows it replaces (drafter/attention.py: chunked_attention).

1. Rows: random blocks (bf16, fp16, fp32; head sizes 64 and 128; grouped heads; keys a
   slice of a longer buffer, queries a transposed view, as in mlx-lm's attention; under,
   across and past MLX's 1,024-key two-pass line), each row of the launch against MLX's
   own vector kernel called for that row alone over its keys, as a classic step calls
   it: equal bit for bit?
2. Exactness: the 12 held-out prompts decoded greedily (128 tokens) at width 8 with the
   launch, equal to classic decode; then 4 long prompts (960 to 1,020 tokens) whose
   decoding crosses the line.
3. Round by round (`ab.alternate_rounds`, RUNS runs): "before" (chunks) and "rows", on
   the profile's short prompt, then RUNS // 2 runs on a 1,040-token prompt (every round
   past the line).
argv: runs (default 8). Prints JSON lines and the rounds' lines."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import partial

import mlx.core as mx
from ab import HELD_OUT, alternate_rounds, decodes_as_classic, width8_engine

from drafter import attention, vector_rows
from drafter.engine import Engine
from server.tooling.bench import read_prompts_file

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 8
# (rows, keys): under the line, across it (rows on both sides), past it
CASES = [(2, 9), (3, 40), (4, 100), (8, 257), (8, 1024), (9, 600), (16, 700)]
CASES += [(2, 1025), (3, 1026), (8, 1028), (8, 1031), (16, 1030), (8, 1032), (8, 1500), (8, 2100)]
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
            for rows, keys in CASES:
                equal = rows_equal(dtype, D, rows, keys)
                exact = exact and equal
                row = {"dtype": str(dtype), "D": D, "rows": rows, "keys": keys, "equal": equal}
                print(json.dumps(row), flush=True)
    print(json.dumps({"rows_exact": exact}), flush=True)
    return exact


def long_prompt(engine: Engine, tokens: int) -> list[int]:
    """The held-out prompts joined, cut to `tokens` tokens."""
    text = "\n\n".join(read_prompts_file(HELD_OUT).prompts)
    return engine.tokenizer.encode(text)[:tokens]


mx.random.seed(0)
engine = width8_engine()  # its loader sets MLX_CUDA_USE_CUDNN_SDPA=0 before any attention
LONG = [long_prompt(engine, tokens) for tokens in (960, 1000, 1010, 1020)]  # cross 1,024 keys
if (
    check_rows()
    and decodes_as_classic(engine, use, "rows")
    and decodes_as_classic(engine, use, "rows", LONG)
):
    arms: dict[str, Callable[[], None]] = {arm: partial(use, arm) for arm in ARMS}
    for run in range(RUNS):
        print(f"rounds run {run}", flush=True)
        alternate_rounds(engine, arms, 8)
    for run in range(RUNS // 2):
        print(f"long rounds run {run}", flush=True)
        alternate_rounds(engine, arms, 8, long_prompt(engine, 1040))
use("rows")
