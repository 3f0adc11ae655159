"""H200: does reading the LM head in vocabulary slices make the round cheaper?

A verify multiplies the head by its 8 rows as 8 batched one-row products, and MLX's
`gemv_batched` runs them one after another: the 57 MB bf16 head of SmolLM2 (more than
the 50 MB L2) is read from device memory 8 times, at the end of the round where nothing
hides it. Arm "after" (this tree) cuts a weight past `rowwise.L2_BYTES` into slices and
runs the batch slice-major, so the rows of a slice read it from L2; arm "before" sets
the budget out of reach (the head unsliced, as before). Same values either way.

First the head product alone (8 rows, synced each call, both arms in blocks of 20
alternating, n = 200 each), then `ab.alternate`: `draftwise profile`'s width-8
measurement, arms AB/BA for n passes. argv: n (default 10), tokens (default 128)."""

from __future__ import annotations

import json
import statistics
import sys
import time

import mlx.core as mx
import mlx.nn as nn
from ab import alternate, width8_engine

import drafter.rowwise as rowwise

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10
TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 128
BUDGET = rowwise.L2_BYTES


def heads(model: nn.Module) -> list[nn.Module]:
    """The modules whose weight is past the L2 budget (the head, tied or not)."""
    return [m for m in model.modules() if "weight" in m and m["weight"].nbytes > BUDGET]


def arm(budget: int, modules: list[nn.Module]) -> None:
    rowwise.L2_BYTES = budget
    for module in modules:
        module.__dict__.pop("_operands", None)  # made again, under this budget


def product_us(weight: mx.array, rows: int, reps: int = 200) -> dict[str, list[float]]:
    x = mx.random.normal((1, rows, weight.shape[1])).astype(weight.dtype)
    kept = {"before": (weight.T, weight.T[None]), "after": rowwise.transposed(weight)}
    mx.eval(x, *kept["after"])
    times: dict[str, list[float]] = {"before": [], "after": []}
    for block in range(reps // 20 + 1):
        for name in ("before", "after") if block % 2 == 0 else ("after", "before"):
            for _ in range(20):
                began = time.perf_counter()
                mx.eval(rowwise.project(x, weight, kept[name]))
                if block:  # the first block warms both up
                    times[name].append(1e6 * (time.perf_counter() - began))
    return times


if __name__ == "__main__":
    engine = width8_engine()
    modules = heads(engine.model)
    assert modules, "no weight past the L2 budget: nothing to compare"
    weight = modules[0]["weight"]
    print(
        json.dumps(
            {
                "head": list(weight.shape),
                "bytes": weight.nbytes,
                "slices": rowwise.vocabulary_slices(weight),
            }
        ),
        flush=True,
    )
    for rows in (1, 8):
        times = product_us(weight, rows)
        line = {a: (statistics.median(v), min(v), max(v)) for a, v in times.items()}
        print(json.dumps({"product_rows": rows, "us_median_min_max": line}), flush=True)
    arms = {"before": lambda: arm(1 << 62, modules), "after": lambda: arm(BUDGET, modules)}
    alternate(engine, arms, N, TOKENS)
