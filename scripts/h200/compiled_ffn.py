"""Compiled feed-forward blocks in the verify (drafter/activation.py, "compiled"): is
the same output bit for bit, what a verify's host build costs, and an in-process A/B.

1. Exactness: one width-8 verify forward's logits and tapped features under "mlx" and
   "compiled", compared bit for bit, after each of the 12 held-out prompts; then those
   prompts decoded greedily (128 tokens) at width 8 under "compiled" against classic.
2. Build and evaluation: a width-8 verify forward (and a one-row step) built without
   evaluating it, then evaluated, n = 50 each per arm: where a verify's time goes.
3. `ab.alternate`: `draftwise profile`'s width-8 measurement, arms alternating, n passes:
   "before" (mlx, the shipped CUDA activation), "compiled", and "all" (compiled one-row
   steps too: would classic decode gain as much?).
argv: n (default 10), tokens (default 128). Prints JSON lines."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import partial

import mlx.core as mx
from ab import alternate, build_and_evaluate, decode, width8_engine

from drafter import activation
from drafter.decoding import GenerationStats
from drafter.engine import Engine
from drafter.sampling import SamplingParams
from drafter.speculative import Session
from server.tooling.bench import read_prompts_file

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10
TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 128
PROMPTS = "server/tooling/heldout_prompts.json"


def verify_once(engine: Engine, prompt: list[int], mode: str) -> list[mx.array]:
    """A width-8 session's prefill, then one verify forward over 8 fixed tokens."""
    engine.activation = mode
    session = Session(engine, SamplingParams(), GenerationStats(), True, width=8)
    session.prefill(prompt, 64)
    logits = engine.model(mx.array([prompt[-8:]]), cache=session.cache)
    assert session.capture is not None
    out = [logits, session.capture.features()]
    mx.eval(out)
    return out


def exactness(engine: Engine, prompts: list[list[int]]) -> bool:
    ok = True
    for i, prompt in enumerate(prompts):
        plain = verify_once(engine, prompt, "mlx")
        compiled = verify_once(engine, prompt, "compiled")
        equal = all(mx.array_equal(a, b).item() for a, b in zip(plain, compiled, strict=True))
        classic = decode(engine, prompt, 1, TOKENS)
        spec = decode(engine, prompt, 8, TOKENS)
        row = {"prompt": i, "verify_equal": equal, "decode_equal": spec == classic}
        print(json.dumps(row), flush=True)
        ok = ok and equal and spec == classic
    print(json.dumps({"exact": ok}), flush=True)
    return ok


def use(engine: Engine, mode: str) -> None:
    """Arm "all" is "compiled" with one-row calls compiled too."""
    activation.FEWEST_COMPILED_ROWS = 1 if mode == "all" else 2
    engine.activation = "mlx" if mode == "before" else "compiled"


def build_and_eval(engine: Engine, prompt: list[int], mode: str, rows: int, n: int = 50) -> None:
    use(engine, mode)
    session = Session(engine, SamplingParams(), GenerationStats(), True, width=8)
    session.prefill(prompt, 64)
    tokens = mx.array([prompt[-rows:]])

    def verify() -> list[mx.array]:
        out = [engine.model(tokens, cache=session.cache)]
        if session.capture is not None and rows > 1:
            out.append(session.capture.features())
        return out

    build_ms, eval_ms = build_and_evaluate(
        verify, lambda: [cache.trim(rows) for cache in session.cache], n
    )
    row = {"build_arm": mode, "rows": rows, "build_ms": build_ms, "eval_ms": eval_ms}
    print(json.dumps(row), flush=True)


engine = width8_engine()
prompts = [engine.tokenizer.encode(p) for p in read_prompts_file(PROMPTS).first_per_kind(4).prompts]
exact = exactness(engine, prompts)
for _ in range(2):
    for mode in ("before", "compiled", "all"):
        build_and_eval(engine, prompts[0], mode, 8)
        build_and_eval(engine, prompts[0], mode, 1)
if exact:
    arms: dict[str, Callable[[], None]] = {
        mode: partial(use, engine, mode) for mode in ("before", "compiled", "all")
    }
    alternate(engine, arms, N, TOKENS)
