"""What a prefill costs under each engine mode: cold prefills of every prompt of a bench
prompts file (and of longer cuts of their concatenation), one loaded engine, the arms
alternating per prompt and repeat (AB/BA).

Why: a served request's time to first token is its prefill, and on the CPU a prefill of a
few hundred tokens is as much exp work (attention's softmax, the feed-forward's SwiGLU)
as matrix products (docs/benchmark_results/cpu-amd-prefill-polyexp.md). An arm sets the
engine's activation (drafter/activation.py), attention (drafter/attention.py) or the
prefill chunk on the CPU (`step=`, drafter/decoding.py: CPU_PREFILL_STEP), e.g.

    LD_PRELOAD=.venv/lib/libmkl_rt.so.3 MKL_CBWR=AUTO,STRICT .venv/bin/python \\
      scripts/prefill_modes.py --prompts-file P --per-kind 8 \\
      --arms activation=mlx,activation=prefill

Freed memory is kept, as a serving process keeps it wherever polyexp serves
(drafter/loading.py: keep_freed_memory). It prints each prompt's length and each arm's
median ms, then per arm the sum of the file's medians and its ratio to the first arm's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import mlx.core as mx

import drafter.decoding as decoding
from drafter.engine import Engine
from drafter.loading import LoadOptions, keep_freed_memory, load_engine
from server.settings import ServeSettings
from server.tooling.bench import read_prompts_file

SETTINGS = ("activation", "attention", "step")
STEP = decoding.CPU_PREFILL_STEP  # an arm without step= runs the shipped chunk


def apply(engine: Engine, arm: str) -> None:
    """Set `arm`'s `name=value` settings (`+` between several) on the engine."""
    decoding.CPU_PREFILL_STEP = STEP
    for setting in arm.split("+"):
        name, value = setting.split("=")
        if name not in SETTINGS:
            raise SystemExit(f"--arms: {name!r} is none of {SETTINGS}")
        if name == "step":
            decoding.CPU_PREFILL_STEP = int(value)
        else:
            setattr(engine, name, value)


def prefill_ms(engine: Engine, tokens: list[int]) -> float:
    cache = engine.make_cache()
    began = time.perf_counter()
    mx.eval(decoding.prefill(engine.model, tokens, cache))
    return 1000 * (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts-file", type=read_prompts_file, required=True)
    parser.add_argument("--per-kind", type=int, help="the first N prompts of each kind")
    parser.add_argument("--arms", default="activation=mlx,activation=prefill")
    parser.add_argument("--long", default="700,1000", help="cuts of the prompts, in tokens")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("freed memory kept:", keep_freed_memory())
    options = LoadOptions(
        cache_dir=ServeSettings().cache_dir, exactness="off", warm_up=False, freeze_heap=True
    )
    engine = load_engine(options).engine
    chosen = args.prompts_file
    chosen = chosen if args.per_kind is None else chosen.first_per_kind(args.per_kind)
    prompts = [engine.tokenizer.encode(text) for text in chosen.prompts]
    stream = [token for prompt in prompts for token in prompt]
    longs = [stream[:n] for n in map(int, args.long.split(","))] if args.long else []
    arms = args.arms.split(",")
    for arm in arms:  # untimed: each arm's first shapes and compiles
        apply(engine, arm)
        prefill_ms(engine, prompts[0])
    times: dict[str, list[list[float]]] = {arm: [[] for _ in prompts + longs] for arm in arms}
    for repeat in range(args.repeats):
        for index, tokens in enumerate(prompts + longs):
            for arm in arms if (repeat + index) % 2 == 0 else arms[::-1]:
                apply(engine, arm)
                times[arm][index].append(prefill_ms(engine, tokens))
    for index, tokens in enumerate(prompts + longs):
        medians = {arm: round(statistics.median(times[arm][index]), 1) for arm in arms}
        print(json.dumps({"tokens": len(tokens), "ms": medians}))
    first = sum(statistics.median(t) for t in times[arms[0]][: len(prompts)])
    for arm in arms:
        total = sum(statistics.median(t) for t in times[arm][: len(prompts)])
        print(f"{arm}: {len(prompts)} prompts, sum of medians {total:.0f} ms, {total / first:.3f}")


if __name__ == "__main__":
    main()
