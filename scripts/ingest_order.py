"""In-process A/B of where a speculative prefill takes the prompt into the drafter:
"before" (the ingest queued ahead of the first token's sync, as at 379f4af) or "after"
(the first token's sync first, this tree's `Session.prefill_chunks`). Per prompt of a
bench prompts file and pass, the arms alternate (AB/BA); each runs one speculative
request at --width of --max-tokens greedy tokens (EOS ignored) from a cold prefill and
reports its time to the first token and its whole time. One JSON line per request,
then per arm the medians and ranges, and whether the arms' tokens agree.

On the CPU run it as `draftwise` runs (MKL preloaded):
  LD_PRELOAD=.venv/lib/libmkl_rt.so.3 MKL_CBWR=AUTO,STRICT \\
    .venv/bin/python scripts/ingest_order.py --prompts-file P --per-kind 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Generator

import mlx.core as mx

from drafter.decoding import GenerationStats, Token, make_tokens, prefill_steps
from drafter.engine import Engine
from drafter.loading import LoadOptions, load_engine
from drafter.sampling import SamplingParams, log_softmax, token_scores
from drafter.speculative import Session
from server.settings import ServeSettings
from server.tooling.bench import read_prompts_file

AFTER = Session.prefill_chunks


def before(self: Session, prompt: list[int], max_tokens: int) -> Generator[None, None, list[Token]]:
    """379f4af's `prefill_chunks` (no prompt cache, KV reserved as served)."""
    from drafter.attention import reserve

    self.cache, start, cached = self.engine.start_cache(prompt, self.stats, features=True)
    logits, features = yield from prefill_steps(
        self.model, prompt[start:], self.cache, self.capture
    )
    everything = mx.concatenate(([] if cached is None else [cached]) + features, axis=1)
    self.engine.remember(prompt, self.cache, everything)
    if self.engine.reserve_kv:
        reserve(self.cache + self.draft_cache, len(prompt), max_tokens + self.width)
    assert self.drafter is not None
    self.drafter.ingest(everything, self.draft_cache)
    mx.async_eval([c.state for c in self.draft_cache])
    self.context = everything[:, :0]
    scores = token_scores(logits, self.counts, self.params)
    anchor = self.chooser.choose(scores).item()
    self.count([anchor])
    return make_tokens([anchor], log_softmax(scores)[None], self.params)


def request(engine: Engine, prompt: list[int], width: int, tokens: int) -> dict[str, object]:
    session = Session(engine, SamplingParams(), GenerationStats(), True, width=width)
    began = time.perf_counter()
    ids: list[int] = []
    first = 0.0
    for step in session.generate(prompt, tokens):
        if not ids:
            first = time.perf_counter() - began
        ids += [t.id for t in step]
    return {"ttft_ms": 1e3 * first, "e2e_ms": 1e3 * (time.perf_counter() - began), "ids": ids}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts-file", type=read_prompts_file, required=True)
    parser.add_argument("--per-kind", type=int, default=None)
    parser.add_argument("--width", type=int, default=None, help="default: the engine's")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--passes", type=int, default=2)
    args = parser.parse_args()
    prompts_file = args.prompts_file
    if args.per_kind is not None:
        prompts_file = prompts_file.first_per_kind(args.per_kind)
    options = LoadOptions(ServeSettings().cache_dir, exactness="off", warm_up=True)
    engine = load_engine(options).engine
    engine.prompt_cache = None  # every request a cold prefill, as `draftwise bench` serves
    width: int = args.width or engine.block_size or 1
    arms = {"before": before, "after": AFTER}
    rows: dict[str, list[dict[str, object]]] = {name: [] for name in arms}
    prompts = [engine.tokenizer.encode(p) for p in prompts_file.prompts]
    for name in arms:  # untimed: every prompt's shapes met once per arm
        Session.prefill_chunks = arms[name]  # type: ignore[method-assign]
        for prompt in prompts:
            request(engine, prompt, width, 4)
    turn = 0
    for p in range(args.passes):
        for i, prompt in enumerate(prompts):
            names = list(arms) if turn % 2 == 0 else list(arms)[::-1]
            turn += 1
            for name in names:
                Session.prefill_chunks = arms[name]  # type: ignore[method-assign]
                row = request(engine, prompt, width, args.max_tokens)
                rows[name].append(row)
                line = {"arm": name, "pass": p, "prompt": i, "width": width}
                print(json.dumps(line | {k: row[k] for k in ("ttft_ms", "e2e_ms")}), flush=True)
    Session.prefill_chunks = AFTER  # type: ignore[method-assign]
    for name, got in rows.items():
        for key in ("ttft_ms", "e2e_ms"):
            values = [float(r[key]) for r in got]  # type: ignore[arg-type]
            low, mid, high = min(values), statistics.median(values), max(values)
            print(f"{name} {key}: median {mid:.2f} ({low:.2f}-{high:.2f}), n = {len(values)}")
    pairs = zip(rows["before"], rows["after"], strict=True)
    faster = sum(float(a["ttft_ms"]) < float(b["ttft_ms"]) for b, a in pairs)  # type: ignore[arg-type]
    print(f"after's first token sooner in {faster} of {len(rows['after'])} paired requests")
    same = all(a["ids"] == b["ids"] for a, b in zip(rows["before"], rows["after"], strict=True))
    print(f"tokens identical across arms: {same}")


if __name__ == "__main__":
    main()
