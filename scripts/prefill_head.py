"""What the prefill's LM head costs: the default target's prefill with the head over every
row against the head over the last row only (drafter/decoding.py: last_row_head).

Why: a prefill needs only its last row's logits, and mlx-lm's forward computes all of
them; on a CPU the tied head is the largest product of the forward. Both arms run in one
process, alternating A/B and B/A, each prompt length in turn, and each arm's logits are
compared with the other's (the last row's values and its argmax).

Choose the BLAS as the server would, as for scripts/cpu_blas_rows.py, e.g.

    LD_PRELOAD=.venv/lib/libmkl_rt.so.3 MKL_CBWR=AUTO,STRICT python scripts/prefill_head.py

It prints one JSON object: the bound BLAS and, per prompt length, each arm's median ms
(and range) and the largest |difference| between the two arms' last-row logits.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import mlx.core as mx
from mlx_lm import load
from mlx_lm.models.cache import make_prompt_cache

from drafter.checkpoints.smollm2 import ensure_smollm2
from drafter.cpu_blas import blas_in_use
from drafter.decoding import last_row_head

TEXT = "def quicksort(items):\n    if len(items) <= 1:\n        return items\n" * 200
ARMS: dict[str, Callable[[Any], AbstractContextManager[None]]] = {
    "every_row": lambda model: nullcontext(),
    "last_row": last_row_head,
}


def prefill_ms(model: Any, ids: list[int], arm: str) -> tuple[float, mx.array]:
    """One prefill of `ids` (a single chunk) under `arm`: (ms, last-row logits)."""
    cache = make_prompt_cache(model)
    began = time.perf_counter()
    with ARMS[arm](model):
        logits = model(mx.array(ids)[None], cache=cache)[0, -1]
    mx.eval(logits, [c.state for c in cache])
    return (time.perf_counter() - began) * 1000, logits


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[32, 300, 1000])
    p.add_argument("--repeats", type=int, default=6)
    args = p.parse_args()
    model, tokenizer = load(str(ensure_smollm2()))
    ids = tokenizer.encode(TEXT)
    result: dict[str, Any] = {"blas": blas_in_use(), "repeats": args.repeats, "lengths": {}}
    for length in args.lengths:
        prompt = ids[:length]
        times: dict[str, list[float]] = {arm: [] for arm in ARMS}
        logits: dict[str, mx.array] = {}
        for repeat in range(args.repeats + 1):  # the first pass warms up and is dropped
            order = list(ARMS) if repeat % 2 else list(reversed(ARMS))
            for arm in order:
                ms, logits[arm] = prefill_ms(model, prompt, arm)
                if repeat:
                    times[arm].append(ms)
        a, b = logits["every_row"], logits["last_row"]
        result["lengths"][str(length)] = {
            arm: {"median_ms": statistics.median(t), "min_ms": min(t), "max_ms": max(t)}
            for arm, t in times.items()
        } | {
            "max_abs_logit_difference": float(mx.max(mx.abs(a - b))),
            "same_argmax": int(mx.argmax(a)) == int(mx.argmax(b)),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
