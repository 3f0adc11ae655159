"""H200 experiment: an LM head's verify rows in one pass, exact, and cheaper?

A verify multiplies the LM head by its 8 rows as 8 batched one-row products
(drafter/rowwise.py). MLX's `gemv_batched` gives each batch item its own blocks of 8
outputs: a 49,152-token head times 8 rows is 49,152 blocks, and on an H200 that product
took 190 us against 68 us for one row (docs/benchmark_results/h200-sliced-head.md), at
the end of the round where nothing hides it; reading the head in L2-sized slices did
not help, so the guess was the blocks, not the reads (session 35's H100 answered: no
gain, docs/benchmark_results/h100-fused-head.md).

`fused_rows` (scripts/h200/fused_rows.py) runs MLX's `gemv_impl` with the rows inside
each warp, one block per 8 outputs. This script checks it is exact and cheaper:

1. Exactness: head-like shapes, 2 to 16 rows, three dtypes: `fused_rows` against the
   batched one-row products and against each row's own one-row product, bit for bit.
2. The products alone (the heads: 8 target rows, 7 draft rows; a gate and a k product),
   synced each call, arms in alternating blocks of 20, n = 200 each (us).
3. `ab.alternate`: `draftwise profile`'s width-8 measurement in three arms: "before" as
   shipped, "head" with the weights past 8 MB (the target's head, the drafter's
   restricted head) multiplied by `fused_rows`, "all" with every multi-row product so,
   in alternating order for n passes. argv: n (default 10), tokens
   (default 128)."""

from __future__ import annotations

import json
import statistics
import sys
import time

import fused_rows as fused_rows_module
import mlx.core as mx
from ab import alternate, width8_engine
from fused_rows import HEADS_BYTES, SHIPPED, fused_project, fused_rows, use

from drafter.dflash import DFlashDrafter

# Heads and SmolLM2-135M's own products (q/o 576, k/v 192, gate/up 1536, down K = 1536),
# and odd shapes (N not a multiple of 8, K of 64).
SHAPES = [(49152, 576), (16384, 576), (576, 576), (192, 576), (1536, 576), (576, 1536)]
SHAPES += [(4104, 600), (4096, 640)]


def exactness() -> bool:
    ok = True
    for dtype in (mx.bfloat16, mx.float16, mx.float32):
        for n, k in SHAPES:
            weight = mx.random.normal((n, k), key=mx.random.key(n + k)).astype(dtype)
            for rows in (2, 3, 7, 8, 16):
                x = mx.random.normal((rows, k), key=mx.random.key(rows)).astype(dtype)
                fused, want = fused_rows(x, weight), SHIPPED(x, weight)
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


def product_us(weight: mx.array, rows: int, reps: int = 200) -> None:
    x = mx.random.normal((rows, weight.shape[1])).astype(weight.dtype)
    arms = {"batched": lambda: SHIPPED(x, weight), "fused": lambda: fused_rows(x, weight)}
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


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    print(json.dumps({"exact": exactness()}), flush=True)
    engine = width8_engine()
    assert isinstance(engine.drafter, DFlashDrafter)
    product_us(engine.model.model.embed_tokens.weight, rows=8)
    product_us(engine.drafter.head.weight, rows=7)  # the restricted draft head
    product_us(engine.model.model.layers[0].mlp.gate_proj.weight, rows=8)
    product_us(engine.model.model.layers[0].self_attn.k_proj.weight, rows=8)

    def fused(threshold: int) -> None:
        fused_rows_module.FUSED_BYTES = threshold
        use(fused_project)

    arms = {
        "before": lambda: use(SHIPPED),
        "head": lambda: fused(HEADS_BYTES),
        "all": lambda: fused(0),
    }
    alternate(engine, arms, n, tokens)
