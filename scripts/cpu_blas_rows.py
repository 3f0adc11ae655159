"""The default target's forward by rows, and its row-for-row exactness, under this process's BLAS.

Why: on CPU a verify forward of w rows costs what the BLAS charges for w rows against the
classic step's one (docs/benchmark_results/cpu-blas-mkl.md), and greedy speculation stays
byte-identical to classic decode only if a row's logits have the same bits whatever the
number of rows beside it. Both depend on the BLAS and the CPU, so this measures them.

Run it once per BLAS, choosing the BLAS the way the server would (LD_PRELOAD and its
variables): `python -m server.cli` does that for serving; here the caller sets them, e.g.

    LD_PRELOAD=.venv/lib/libmkl_rt.so.3 MKL_CBWR=AUTO,STRICT python scripts/cpu_blas_rows.py
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libopenblas.so.0 python scripts/cpu_blas_rows.py

It prints one JSON object: the bound BLAS, the forward's median ms (and range) by rows,
and for each exactness case the largest |difference| between one w-row forward and w
one-row forwards of the same tokens from the same prefilled cache.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm import load
from mlx_lm.models.cache import make_prompt_cache

from drafter.checkpoints.smollm2 import ensure_smollm2
from drafter.cpu_blas import blas_in_use

ROWS = (1, 2, 3, 4, 8)
TIMING_PROMPT = "def quicksort(items):\n    " * 8
EXACTNESS_PROMPTS = (
    "def quicksort(items):\n    ",
    "What is the difference between a list and a tuple in Python?",
    "Once upon a time, in a small village by the sea,",
    "import numpy as np\nimport pandas as pd\n",
)
EXACTNESS_WIDTHS = (2, 3, 4, 8)


def prefilled(model: nn.Module, ids: list[int]) -> list[Any]:
    cache = make_prompt_cache(model)
    mx.eval(model(mx.array(ids)[None], cache=cache))
    return cache


def forward_ms(model: nn.Module, ids: list[int], repeats: int) -> dict[int, list[float]]:
    """Per row count, the time of a forward over that many new rows (rolled back each time)."""
    times: dict[int, list[float]] = {rows: [] for rows in ROWS}
    for repeat in range(repeats + 1):  # the first pass warms up and is dropped
        for rows in ROWS:
            cache = prefilled(model, ids)
            x = mx.array([[5] * rows])
            mx.eval(model(x, cache=cache))
            for layer in cache:
                layer.trim(rows)
            began = time.perf_counter()
            mx.eval(model(x, cache=cache))
            if repeat:
                times[rows].append((time.perf_counter() - began) * 1000)
    return times


def row_differences(model: nn.Module, ids: list[int], continuation: list[int]) -> dict[str, Any]:
    """One w-row forward against w one-row forwards of the same tokens, from the same cache."""
    together = model(mx.array(continuation)[None], cache=prefilled(model, ids))[0]
    cache = prefilled(model, ids)
    alone = mx.concatenate([model(mx.array([[t]]), cache=cache)[0] for t in continuation])
    difference = mx.abs(together - alone).max().item()
    flips = (mx.argmax(together, axis=-1) != mx.argmax(alone, axis=-1)).sum().item()
    return {"max_abs_difference": difference, "argmax_flips": flips}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args()
    model, tokenizer = load(str(ensure_smollm2(None, "float32")))
    timing_ids = tokenizer.encode(TIMING_PROMPT)
    times = forward_ms(model, timing_ids, args.repeats)
    cases = []
    for prompt in EXACTNESS_PROMPTS:
        ids = tokenizer.encode(prompt)
        # the target's own greedy continuation, as a verify block would mostly hold
        greedy = [int(mx.argmax(model(mx.array(ids)[None])[0, -1]).item())]
        for width in EXACTNESS_WIDTHS:
            while len(greedy) < width:
                logits = model(mx.array(ids + greedy)[None])[0, -1]
                greedy.append(int(mx.argmax(logits).item()))
            case = row_differences(model, ids, greedy[:width])
            cases.append({"prompt": prompt[:24], "width": width, **case})
    one_row = statistics.median(times[1])
    print(
        json.dumps(
            {
                "blas": blas_in_use(),
                "mkl_cbwr": os.environ.get("MKL_CBWR"),
                "repeats": args.repeats,
                "forward_ms": {
                    str(rows): {
                        "median": round(statistics.median(t), 2),
                        "low": round(min(t), 2),
                        "high": round(max(t), 2),
                        "vs_one_row": round(statistics.median(t) / one_row, 3),
                    }
                    for rows, t in times.items()
                },
                "cases_differing": sum(c["max_abs_difference"] > 0 for c in cases),
                "cases": cases,
            }
        )
    )


if __name__ == "__main__":
    main()
