"""The default target's forward by rows, and its row-for-row exactness, under this process's BLAS.

Why: on CPU a verify forward of w rows costs what the BLAS charges for w rows against the
classic step's one (docs/benchmark_results/cpu-blas-mkl.md), and greedy speculation stays
byte-identical to classic decode only if a row's logits have the same bits whatever the
number of rows beside it. Both depend on the BLAS and the CPU, so this measures them.

Run it once per BLAS, choosing the BLAS the way the server would (LD_PRELOAD and its
variables): `python -m server.cli` does that for serving; here the caller sets them, e.g.

    LD_PRELOAD=.venv/lib/libmkl_rt.so.3 MKL_CBWR=AUTO,STRICT python scripts/cpu_blas_rows.py
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libopenblas.so.0 python scripts/cpu_blas_rows.py

`--linear` sets the product layout (drafter/linear.py; default: what the engine chooses
under this BLAS), e.g. `--linear columns` against `--linear padded` under MKL.

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
from mlx_lm import load

from drafter.checkpoints.smollm2 import ensure_smollm2
from drafter.cpu_blas import blas_in_use
from drafter.decoding import prefill
from drafter.diagnostics import LINEAR_MODES
from drafter.engine import Engine
from drafter.probe import classic_tokens, teacher_forced_logits

ROWS = (1, 2, 3, 4, 8)
TIMING_PROMPT = "def quicksort(items):\n    " * 8
EXACTNESS_PROMPTS = (
    "def quicksort(items):\n    ",
    "What is the difference between a list and a tuple in Python?",
    "Once upon a time, in a small village by the sea,",
    "import numpy as np\nimport pandas as pd\n",
)
EXACTNESS_WIDTHS = (2, 3, 4, 8)


def forward_ms(engine: Engine, ids: list[int], repeats: int) -> dict[int, list[float]]:
    """Per row count, the time of a forward over that many new rows (rolled back each time)."""
    times: dict[int, list[float]] = {rows: [] for rows in ROWS}
    for repeat in range(repeats + 1):  # the first pass warms up and is dropped
        for rows in ROWS:
            cache = engine.make_cache()
            prefill(engine.model, ids, cache)
            x = mx.array([[5] * rows])
            mx.eval(engine.model(x, cache=cache))
            for layer in cache:
                layer.trim(rows)
            began = time.perf_counter()
            mx.eval(engine.model(x, cache=cache))
            if repeat:
                times[rows].append((time.perf_counter() - began) * 1000)
    return times


def row_differences(engine: Engine, ids: list[int], width: int) -> dict[str, Any]:
    """One w-row forward against w one-row forwards of the target's own greedy tokens,
    from the same prefill (the exactness probe's kernel noise, drafter/probe.py)."""
    greedy = classic_tokens(engine, ids, width + 1)
    together = teacher_forced_logits(engine, ids, greedy, rows=width)
    alone = teacher_forced_logits(engine, ids, greedy, rows=1)
    difference = mx.abs(together - alone).max().item()
    flips = (mx.argmax(together, axis=-1) != mx.argmax(alone, axis=-1)).sum().item()
    return {"max_abs_difference": difference, "argmax_flips": flips}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--linear", choices=LINEAR_MODES, default=None)
    args = parser.parse_args()
    model, tokenizer = load(str(ensure_smollm2(None, "float32")))
    engine = Engine(model, tokenizer, model_id="smollm2", context_length=8192, linear=args.linear)
    times = forward_ms(engine, tokenizer.encode(TIMING_PROMPT), args.repeats)
    cases = []
    for prompt in EXACTNESS_PROMPTS:
        ids = tokenizer.encode(prompt)
        for width in EXACTNESS_WIDTHS:
            case = row_differences(engine, ids, width)
            cases.append({"prompt": prompt[:24], "width": width, **case})
    one_row = statistics.median(times[1])
    print(
        json.dumps(
            {
                "blas": blas_in_use(),
                "mkl_cbwr": os.environ.get("MKL_CBWR"),
                "linear": engine.linear,
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
