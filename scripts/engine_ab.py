"""In-process A/B of two modes of one engine setting on whole requests: --knob attention
(drafter/attention.py), linear (drafter/linear.py) or activation (drafter/activation.py).

One loaded engine (the default pair unless --model/--draft-model say otherwise); for
each prompt of a bench prompts file the two modes run in AB/BA order (alternating per
prompt and pass), each mode doing a cold prefill of the prompt (`prefill_ms`), a
classic request and a speculative one at --width, both of --max-tokens greedy tokens
with EOS ignored. One JSON line per measurement, then per mode the medians and ranges,
and how many requests' tokens differ between the modes (rounding may move a token).

On the CPU run it as `draftwise` runs (MKL preloaded):
  LD_PRELOAD=.venv/lib/libmkl_rt.so.3 MKL_CBWR=AUTO,STRICT \
    .venv/bin/python scripts/engine_ab.py --prompts-file P --knob attention --modes polyexp,exact
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import mlx.core as mx

from drafter.decoding import GenerationStats, prefill
from drafter.engine import Engine
from drafter.loading import LoadOptions, load_engine
from drafter.sampling import SamplingParams
from drafter.speculative import Session
from server.settings import ServeSettings

GREEDY = SamplingParams()
KNOBS = ("attention", "linear", "activation")  # Engine properties that take a mode


def timed(run: Any) -> tuple[float, Any]:
    began = time.perf_counter()
    out = run()
    return 1000 * (time.perf_counter() - began), out


def measure(engine: Engine, tokens: list[int], width: int, max_tokens: int) -> dict[str, Any]:
    prefill_ms, _ = timed(lambda: mx.eval(prefill(engine.model, tokens, engine.make_cache())))
    classic_ms, classic = timed(
        lambda: [
            t.id for step in engine.classic_generate(tokens, max_tokens, GREEDY, True) for t in step
        ]
    )
    session = Session(engine, GREEDY, GenerationStats(), True, width=width)
    spec_ms, spec = timed(
        lambda: [t.id for step in session.generate(tokens, max_tokens) for t in step]
    )
    return {
        "prefill_ms": round(prefill_ms, 2),
        "classic_tok_s": round(1000 * max_tokens / classic_ms, 3),
        "speculative_tok_s": round(1000 * max_tokens / spec_ms, 3),
        "classic": classic,
        "speculative": spec,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts-file", type=Path, required=True)
    parser.add_argument("--knob", choices=KNOBS, default="attention")
    parser.add_argument("--modes", default="polyexp,exact")
    parser.add_argument("--width", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--model")
    parser.add_argument("--draft-model")
    args = parser.parse_args()
    options = LoadOptions(
        model=args.model,
        draft_model=args.draft_model,
        cache_dir=ServeSettings().cache_dir,
        draft_block_size=str(args.width),
        exactness="off",
        warm_up=False,
        freeze_heap=True,
    )
    engine = load_engine(options).engine
    engine.prompt_cache = None  # every prefill cold, as `draftwise bench` serves
    modes = args.modes.split(",")
    prompts = [
        engine.tokenizer.encode(p) for p in json.loads(args.prompts_file.read_text())["prompts"]
    ]
    rows: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    for mode in modes:  # untimed: each mode's first shapes and compiles
        setattr(engine, args.knob, mode)
        measure(engine, prompts[0], args.width, 8)
    turn = 0
    for pass_ in range(args.passes):
        for index, tokens in enumerate(prompts):
            for mode in modes if turn % 2 == 0 else modes[::-1]:
                setattr(engine, args.knob, mode)
                row = measure(engine, tokens, args.width, args.max_tokens)
                rows[mode].append(row)
                short = {k: v for k, v in row.items() if k not in ("classic", "speculative")}
                print(
                    json.dumps({"mode": mode, "pass": pass_, "prompt": index, **short}), flush=True
                )
            turn += 1
    for mode, measured in rows.items():
        for field in ("prefill_ms", "classic_tok_s", "speculative_tok_s"):
            values = [r[field] for r in measured]
            print(
                mode,
                field,
                f"median {statistics.median(values):.2f}",
                f"range {min(values):.2f}-{max(values):.2f} n={len(values)}",
            )
        same = sum(r["classic"] == r["speculative"] for r in measured)
        print(mode, f"speculative equals classic in {same} of {len(measured)} requests")
    first, second = (rows[m] for m in modes[:2])
    moved = sum(a["classic"] != b["classic"] for a, b in zip(first, second, strict=True))
    print(f"classic tokens differ between {modes[0]} and {modes[1]} in {moved} of {len(first)}")


if __name__ == "__main__":
    main()
