"""In-process A/B of round code on the H200: arms swap functions in one loaded engine.

`before/` holds an older tree's modules (written with `git show REV:drafter/X.py`,
kept out of git and carried with the call); `module_from` loads one under its own
name. `alternate` runs `draftwise profile`'s measurement at one width (8 unless
`width` says otherwise; the engine is loaded for 8, the widest) with the arms
alternating (AB, BA, ...) for n passes and prints one JSON line per measurement."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import mlx.core as mx

from drafter.decoding import GenerationStats
from drafter.engine import Engine
from drafter.loading import LoadOptions, load_engine
from drafter.sampling import SamplingParams
from drafter.speculative import Session
from server.settings import ServeSettings
from server.tooling.bench import read_prompts_file
from server.tooling.profile import DEFAULT_PROMPT, profile_width

PROMPT = "def quicksort(items):"


def module_from(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while defining
    spec.loader.exec_module(module)
    return module


def width8_engine() -> Engine:
    options = LoadOptions(
        cache_dir=ServeSettings().cache_dir,
        draft_block_size="8",
        exactness="off",
        warm_up=False,
        freeze_heap=True,
    )
    return load_engine(options).engine


def alternate(
    engine: Engine, arms: dict[str, Callable[[], None]], n: int, tokens: int, width: int = 8
) -> None:
    """Each arm's `use` swaps its code in; cold rounds of every arm first, untimed."""
    prompt = engine.tokenizer.encode(PROMPT)
    names = list(arms)
    for name in names:
        arms[name]()
        profile_width(engine, width, prompt, 32, 1, 0)
    for i in range(n):
        for name in names if i % 2 == 0 else names[::-1]:
            arms[name]()
            p = profile_width(engine, width, prompt, tokens, 2, 0)
            row = {
                "arm": name,
                "width": width,
                "pass": i,
                "round_ms": p.round_ms,
                "draft_ms": p.draft_ms,
                "verify_ms": p.verify_ms,
                "step_ms": p.step_ms,
                "acceptance_length": p.acceptance_length,
                "stages_ms": p.stages_ms,
            }
            print(json.dumps(row), flush=True)


def alternate_rounds(
    engine: Engine,
    arms: dict[str, Callable[[], None]],
    width: int,
    prompt: list[int] | None = None,
) -> None:
    """Round by round, where `alternate`'s pooled medians are too coarse for a change of
    a few percent: 25-round requests (`prompt`, else the profile's default), the arms
    swapped in AB/BA order per request for 7 pairs after one untimed pair, each
    request's first two rounds left out. Prints each request's median round and each
    arm's median and mean."""
    prompt = prompt or engine.tokenizer.encode(DEFAULT_PROMPT)
    names = list(arms)
    rounds: dict[str, list[float]] = {name: [] for name in names}
    for pair in range(8):
        for name in names if pair % 2 == 0 else names[::-1]:
            arms[name]()
            session = Session(engine, SamplingParams(), GenerationStats(), True, width=width)
            anchor = session.prefill(prompt, 80)[0].id
            times = []
            for _ in range(25):
                began = time.perf_counter()
                tokens, _ = session.round(anchor, 1000)
                times.append(time.perf_counter() - began)
                anchor = tokens[-1]
            if pair:
                rounds[name] += times[2:]
                median = 1000 * statistics.median(times[2:])
                print(pair, name, f"request median {median:.2f} ms", flush=True)
    for name, seconds in rounds.items():
        median, mean = 1000 * statistics.median(seconds), 1000 * statistics.mean(seconds)
        print(name, len(seconds), f"rounds: median {median:.2f} ms, mean {mean:.2f} ms")


HELD_OUT = "server/tooling/heldout_prompts.json"


def decode(engine: Engine, prompt: list[int], width: int, tokens: int = 128) -> list[int]:
    """`prompt` decoded greedily for `tokens` tokens (EOS ignored) at `width` rows."""
    session = Session(engine, SamplingParams(), GenerationStats(), True, width=width)
    return [t.id for out in session.generate(prompt, tokens) for t in out]


def decodes_as_classic(
    engine: Engine, use: Callable[[str], None], arm: str, prompts: list[list[int]] | None = None
) -> bool:
    """Whether `prompts` (default: the 12 held-out prompts, the first 4 of each kind),
    decoded greedily for 128 tokens at width 8 with `arm` in use, equal classic decode
    with arm "before"; prints one JSON line a prompt, then {"exact": ...}."""
    if prompts is None:
        texts = read_prompts_file(HELD_OUT).first_per_kind(4).prompts
        prompts = [engine.tokenizer.encode(text) for text in texts]
    exact = True
    for i, prompt in enumerate(prompts):
        use("before")
        classic = decode(engine, prompt, 1)
        use(arm)
        equal = decode(engine, prompt, 8) == classic
        exact = exact and equal
        print(json.dumps({"prompt": i, "tokens": len(prompt), f"{arm}_equal": equal}), flush=True)
    print(json.dumps({"exact": exact}), flush=True)
    return exact


def build_and_evaluate(
    build: Callable[[], list[mx.array]], undo: Callable[[], object], n: int = 50
) -> tuple[float, float]:
    """Median ms to build `build()`'s arrays (the Python of it, nothing evaluated) and
    then to evaluate them, over n calls after 5 untimed ones; `undo` after each call
    (a verify's cache rows trimmed off again)."""
    builds, evals = [], []
    for i in range(n + 5):
        began = time.perf_counter()
        out = build()
        built = time.perf_counter()
        mx.eval(out)
        done = time.perf_counter()
        undo()
        if i >= 5:
            builds.append(1e3 * (built - began))
            evals.append(1e3 * (done - built))
    return statistics.median(builds), statistics.median(evals)
