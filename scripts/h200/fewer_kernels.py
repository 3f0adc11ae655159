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

import sys
from functools import partial
from pathlib import Path

from ab import alternate, module_from, width8_engine

import drafter.attention as attention
import drafter.dflash as dflash

N = int(sys.argv[1]) if len(sys.argv) > 1 else 4
TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 128

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
    attention.causal_block = chunked  # dispatch looks it up per call (session 38 on: the
    # one-launch path, which the chunk arms replace whole)
    dflash.Attention.__call__ = call  # type: ignore[method-assign]
    dflash.Attention.fetch = fetch  # type: ignore[method-assign]


alternate(width8_engine(), {arm: partial(use, arm) for arm in ARMS}, N, TOKENS)
