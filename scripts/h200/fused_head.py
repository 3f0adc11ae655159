"""H200: the LM heads' verify rows in one pass (`rowwise.fused_rows`): exact, and cheaper?

1. Exactness: for head-like shapes and 2 to 16 rows, `fused_rows` against the batched
   one-row products (`one_row_each(x) @ weight.T[None]`, what the rowwise layout ran
   before) and against each row's own one-row product: every output bit for bit.
2. The 8-row head product alone, synced each call, both arms in alternating blocks of 20,
   n = 200 each (us).
3. `ab.alternate`: `draftwise profile`'s width-8 measurement, arm "before" with the
   fused path out of reach (`rowwise.FUSED_BYTES` above any weight), "after" as shipped,
   AB/BA for n passes. argv: n (default 10), tokens (default 128)."""

from __future__ import annotations

import json
import statistics
import sys
import time

import mlx.core as mx
from ab import alternate, width8_engine

import drafter.rowwise as rowwise
from drafter.dflash import DFlashDrafter

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10
TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 128
SHIPPED = rowwise.FUSED_BYTES
SHAPES = [(49152, 576), (16384, 576), (8192, 1536), (4096, 640), (4104, 600)]


def batched(x: mx.array, weight: mx.array) -> mx.array:
    rows, k = x.shape
    return (rowwise.one_row_each(x, rows, k) @ weight.T[None]).reshape(rows, -1)


def exactness() -> bool:
    ok = True
    for dtype in (mx.bfloat16, mx.float16, mx.float32):
        for n, k in SHAPES:
            weight = mx.random.normal((n, k), key=mx.random.key(n + k)).astype(dtype)
            for rows in (2, 3, 7, 8, 16):
                x = mx.random.normal((rows, k), key=mx.random.key(rows)).astype(dtype)
                fused, want = rowwise.fused_rows(x, weight), batched(x, weight)
                single = mx.concatenate([x[i : i + 1] @ weight.T for i in range(rows)])
                same = mx.array_equal(fused, want).item()
                same_single = mx.array_equal(fused, single).item()
                ok = ok and same and same_single
                line = {"dtype": str(dtype), "n": n, "k": k, "rows": rows}
                line |= {"equal_batched": same, "equal_one_row": same_single}
                if not same:
                    line["differing"] = int((fused != want).sum().item())
                print(json.dumps(line), flush=True)
    return ok


def product_us(weight: mx.array, rows: int = 8, reps: int = 200) -> None:
    x = mx.random.normal((rows, weight.shape[1])).astype(weight.dtype)
    arms = {"batched": lambda: batched(x, weight), "fused": lambda: rowwise.fused_rows(x, weight)}
    times: dict[str, list[float]] = {a: [] for a in arms}
    for block in range(reps // 20 + 1):
        for name in list(arms) if block % 2 == 0 else list(arms)[::-1]:
            for _ in range(20):
                began = time.perf_counter()
                mx.eval(arms[name]())
                if block:
                    times[name].append(1e6 * (time.perf_counter() - began))
    line = {a: (statistics.median(v), min(v), max(v)) for a, v in times.items()}
    print(json.dumps({"head": list(weight.shape), "rows": rows, "us_median_min_max": line}))


def arm(budget: int) -> None:
    rowwise.FUSED_BYTES = budget


if __name__ == "__main__":
    print(json.dumps({"exact": exactness()}), flush=True)
    engine = width8_engine()
    head = engine.model.model.embed_tokens.weight
    product_us(head)
    assert isinstance(engine.drafter, DFlashDrafter)
    product_us(engine.drafter.head.weight, rows=7)  # the restricted draft head
    alternate(engine, {"before": lambda: arm(1 << 62), "after": lambda: arm(SHIPPED)}, N, TOKENS)
