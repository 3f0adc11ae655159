"""H200: does a round with fewer kernels run faster? One process, arms interleaved.

Arm "before" runs the round code of f310284, loaded from `before/`; arm "after" runs
this tree's. Write before/ with

    mkdir -p before && for f in attention dflash; do
      git show f310284:drafter/$f.py > before/$f.py; done

keep it out of git, and carry it to the device with the call.

The change: the drafter projects its new context rows and its block in one call per
layer (dflash.Attention.fetch), and the chunked verify attention is joined row-major,
so mlx-lm's reshape after it copies nothing (attention.chunked_attention). Each arm
swaps in its functions, then runs `draftwise profile`'s width-8 measurement; the arms
alternate (AB, BA, ...) for n passes. One JSON line per measurement on stdout.
argv: n (default 4), tokens (default 128)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import drafter.attention as attention
import drafter.dflash as dflash
from drafter.loading import LoadOptions, load_engine
from server.settings import ServeSettings
from server.tooling.profile import profile_width

N = int(sys.argv[1]) if len(sys.argv) > 1 else 4
TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 128
PROMPT = "def quicksort(items):"


def module_from(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while defining
    spec.loader.exec_module(module)
    return module


old_attention = module_from(Path("before/attention.py"), "before_attention")
old_dflash = module_from(Path("before/dflash.py"), "before_dflash")
ARMS = {
    "before": (
        old_attention.chunked_attention,
        old_dflash.Attention.__call__,
        old_dflash.Attention.fetch,
    ),
    "after": (attention.chunked_attention, dflash.Attention.__call__, dflash.Attention.fetch),
}


def use(arm: str) -> None:
    chunked, call, fetch = ARMS[arm]
    attention.chunked_attention = chunked  # vector_dispatch looks it up per call
    dflash.Attention.__call__ = call  # type: ignore[method-assign]
    dflash.Attention.fetch = fetch  # type: ignore[method-assign]


options = LoadOptions(
    cache_dir=ServeSettings().cache_dir,
    model=None,
    draft_model=None,
    draft_block_size="8",
    exactness="off",
    dtype="auto",
    warm_up=False,
    freeze_heap=True,
)
engine = load_engine(options).engine
prompt = engine.tokenizer.encode(PROMPT)
for arm in ("before", "after"):  # cold rounds of both, untimed
    use(arm)
    profile_width(engine, 8, prompt, 32, 1, 0)
for i in range(N):
    for arm in ("before", "after") if i % 2 == 0 else ("after", "before"):
        use(arm)
        p = profile_width(engine, 8, prompt, TOKENS, 2, 0)
        row = {
            "arm": arm,
            "pass": i,
            "round_ms": p.round_ms,
            "draft_ms": p.draft_ms,
            "verify_ms": p.verify_ms,
            "step_ms": p.step_ms,
            "acceptance_length": p.acceptance_length,
            "stages_ms": p.stages_ms,
        }
        print(json.dumps(row), flush=True)
