"""H200: what a served prefill costs, and whether a new prompt length costs more than a
repeated one (per-shape setup: cuBLASLt heuristics, kernel JIT) or not (host work).

For each of the 12 held-out prompts (the first 4 of each kind of
server/tooling/heldout_prompts.json), in one loaded width-8 engine (prompt cache off):
the target's forward alone (`prefill` into a fresh cache, evaluated), the speculative
prefill as a request runs it (`Session.prefill`: forward, tapped features, KV reserve,
drafter ingest, first token), and classic's first token (`classic_generate`), each
three times in a row: pass 0 meets the prompt's length first, passes 1-2 repeat it.
Also a one-row classic step, for scale. One JSON line per measurement on stdout."""

from __future__ import annotations

import json
import statistics
import time

import mlx.core as mx
from ab import width8_engine

from drafter.decoding import GenerationStats, prefill
from drafter.sampling import SamplingParams
from drafter.speculative import Session
from server.tooling.bench import HELD_OUT_PROMPTS_FILE, read_prompts_file

engine = width8_engine()
engine.prompt_cache = None
prompts = read_prompts_file(str(HELD_OUT_PROMPTS_FILE)).first_per_kind(4).prompts
greedy = SamplingParams()


def forward(tokens: list[int]) -> None:
    mx.eval(prefill(engine.model, tokens, engine.make_cache()))


def speculative(tokens: list[int]) -> None:
    Session(engine, greedy, GenerationStats(), ignore_eos=True, width=8).prefill(tokens, 128)


def classic(tokens: list[int]) -> None:
    next(iter(engine.classic_generate(tokens, 1, greedy, ignore_eos=True)))


for text in prompts:
    tokens = engine.tokenizer.encode(text)
    for arm, run in (("forward", forward), ("speculative", speculative), ("classic", classic)):
        for repeat in range(3):
            began = time.perf_counter()
            run(tokens)
            ms = 1000 * (time.perf_counter() - began)
            row = {"arm": arm, "tokens": len(tokens), "pass": repeat, "ms": round(ms, 3)}
            print(json.dumps(row), flush=True)
steps: list[float] = []
tokens = engine.tokenizer.encode("def quicksort(items):")
for _request in range(3):
    last = None
    for _ in engine.classic_generate(tokens, 33, greedy, ignore_eos=True):
        now = time.perf_counter()
        if last is not None:  # the first yield carries the prefill
            steps.append(now - last)
        last = now
print(json.dumps({"arm": "classic step", "ms": round(1000 * statistics.median(steps), 3)}))
