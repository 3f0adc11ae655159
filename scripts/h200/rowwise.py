"""H200: rowwise products (drafter/rowwise.py) against the matrix kernels, in MLX.

For the default target (bf16) and its 4-bit g32 re-quantization: the forward's
time over 1, 2, 4, 8 and 16 new rows with each arm (interleaved, n per arm), and
how far a verify forward's logits sit from one-row decode steps over the same
tokens (max |difference| and argmax agreement per row) with each arm.
Prints one JSON object per (target, arm, rows) line."""

import json
import statistics
import sys
from typing import Any

import mlx.core as mx
from mlx_lm import load
from mlx_lm.models.cache import make_prompt_cache

from drafter import rollback
from drafter.checkpoints.smollm2 import ensure_smollm2
from drafter.linear import set_linear
from server.tooling.verify_cost import time_forward

ROWS = [1, 2, 4, 8, 16]
N = int(sys.argv[1]) if len(sys.argv) > 1 else 20
TARGETS = sys.argv[2].split(",") if len(sys.argv) > 2 else ["bf16", "q4g32"]
PROMPT = "def quicksort(items):\n    if len(items) <= 1:\n        return items\n"


def identity(model: Any, tokens: list[int], rows: int) -> dict:
    """Verify `rows` continuation tokens in one forward and one at a time."""
    prefix, block = tokens[:-rows], tokens[-rows:]
    cache = make_prompt_cache(model)
    mx.eval(model(mx.array(prefix)[None], cache=cache))
    ckpt = rollback.checkpoint(cache)
    wide = model(mx.array(block)[None], cache=cache)[0].astype(mx.float32)
    mx.eval(wide)
    rollback.rollback(cache, ckpt, 0, rows)
    narrow = []
    for token in block:
        narrow.append(model(mx.array([[token]]), cache=cache)[0, -1].astype(mx.float32))
    narrow = mx.stack(narrow)
    diff = mx.abs(wide - narrow).max(axis=-1)
    same = (wide.argmax(-1) == narrow.argmax(-1)).sum()
    exact = (diff == 0).sum()
    mx.eval(diff, same, exact)
    return {"max_diff": diff.max().item(), "argmax_same": same.item(), "rows_exact": exact.item()}


for name, quant in (("bf16", None), ("q4g32", 4)):
    if name not in TARGETS:
        continue
    path = ensure_smollm2(None, "bfloat16", quantize_bits=quant)
    model, tokenizer = load(str(path))
    rollback.prepare(model)
    tokens = tokenizer.encode(PROMPT)
    cache = make_prompt_cache(model)
    mx.eval(model(mx.array(tokens * 4)[None], cache=cache))
    samples: dict[tuple[str, int], list[float]] = {
        (arm, r): [] for arm in ("matrix", "rowwise") for r in ROWS
    }
    for arm in ("matrix", "rowwise"):  # warm both arms' kernels
        set_linear(model, "rowwise" if arm == "rowwise" else "matrix")
        for r in ROWS:
            for _ in range(3):
                time_forward(model, cache, r)
    for _ in range(N):
        for arm in ("matrix", "rowwise"):
            set_linear(model, "rowwise" if arm == "rowwise" else "matrix")
            for r in ROWS:
                samples[(arm, r)].append(1000 * time_forward(model, cache, r))
    for arm in ("matrix", "rowwise"):
        set_linear(model, "rowwise" if arm == "rowwise" else "matrix")
        for r in ROWS:
            s = samples[(arm, r)]
            row = {
                "target": name,
                "arm": arm,
                "rows": r,
                "n": len(s),
                "median_ms": round(statistics.median(s), 3),
                "min_ms": round(min(s), 3),
                "max_ms": round(max(s), 3),
            }
            if r > 1:
                row.update(identity(model, tokenizer.encode(PROMPT * 2), r))
            print(json.dumps(row), flush=True)
    set_linear(model, "matrix")
