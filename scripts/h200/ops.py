"""H200: what a multi-row forward pays per layer, op by op, against one row.

Each measurement is a chain of 30 dependent ops (one per layer of SmolLM2-135M),
built and evaluated as a forward would be; the figure is the chain's wall time.
Arms are interleaved; n timed chains per arm after 3 warm ones. One JSON line per
(op, arm, rows). argv: n, then "nocudnn" when run with MLX_CUDA_USE_CUDNN_SDPA=0."""

import json
import statistics
import sys
import time
from collections.abc import Callable

import mlx.core as mx

from drafter.attention import tail_mask
from drafter.rowwise import project

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20
TAG = sys.argv[2] if len(sys.argv) > 2 else "cudnn"
DEPTH, DIM, HEADS, KV_HEADS, HEAD_DIM, KEYS, BUFFER = 30, 576, 9, 3, 64, 320, 512
ROWS = [1, 2, 3, 4, 8, 16]
W = mx.random.normal((DIM, DIM)).astype(mx.bfloat16) * 0.04
WIDE = mx.random.normal((1536, DIM)).astype(mx.bfloat16) * 0.04
K_BUF = mx.random.normal((1, KV_HEADS, BUFFER, HEAD_DIM)).astype(mx.bfloat16)
V_BUF = mx.random.normal((1, KV_HEADS, BUFFER, HEAD_DIM)).astype(mx.bfloat16)
mx.eval(W, WIDE, K_BUF, V_BUF)


def matmul(x: mx.array, rowwise: bool) -> mx.array:
    for _ in range(DEPTH):
        x = project(x, W) if rowwise else x @ W.T
    return x


def sdpa(q: mx.array, keys: str, mask: mx.array | str | None) -> mx.array:
    k, v = (K_BUF, V_BUF) if keys == "buffer" else (K_BUF[..., :KEYS, :], V_BUF[..., :KEYS, :])
    for _ in range(DEPTH):
        q = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.125, mask=mask)
    return q


def norm(x: mx.array) -> mx.array:
    weight = mx.ones((DIM,), mx.bfloat16)
    for _ in range(DEPTH):
        x = mx.fast.rms_norm(x, weight, 1e-5)
    return x


def arms(rows: int) -> dict[str, Callable[[], mx.array]]:
    x = mx.random.normal((1, rows, DIM)).astype(mx.bfloat16)
    q = mx.random.normal((1, HEADS, rows, HEAD_DIM)).astype(mx.bfloat16)
    mx.eval(x, q)
    out = {
        "matmul-matrix": lambda: matmul(x, False),
        "matmul-rowwise": lambda: matmul(x, True),
        "rms_norm": lambda: norm(x),
    }
    if rows == 1:
        out["sdpa-exact"] = lambda: sdpa(q, "exact", None)
    else:
        mask = tail_mask(KEYS - rows, rows, BUFFER, mx.bfloat16, causal=True)
        mx.eval(mask)
        out["sdpa-exact-causal"] = lambda: sdpa(q, "exact", "causal")
        out["sdpa-stable-mask"] = lambda: sdpa(q, "buffer", mask)
    return out


def timed(fn: Callable[[], mx.array]) -> float:
    start = time.perf_counter()
    mx.eval(fn())
    return 1000 * (time.perf_counter() - start)


plan = {rows: arms(rows) for rows in ROWS}
for fns in plan.values():
    for fn in fns.values():
        for _ in range(3):
            timed(fn)
samples: dict[tuple[int, str], list[float]] = {
    (r, name): [] for r, fns in plan.items() for name in fns
}
for _ in range(N):
    for r, fns in plan.items():
        for name, fn in fns.items():
            samples[(r, name)].append(timed(fn))
for (r, name), s in samples.items():
    print(
        json.dumps(
            {
                "op": name,
                "sdpa": TAG,
                "rows": r,
                "n": len(s),
                "median_ms": round(statistics.median(s), 3),
                "min_ms": round(min(s), 3),
                "max_ms": round(max(s), 3),
            }
        ),
        flush=True,
    )
