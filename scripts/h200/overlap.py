"""Does the device run part of a round while the host still builds the rest of it?

A speculative round is built whole (draft, verify, choice) and evaluated at its one
sync, so the device idles while Python builds it (h100-build-profile.md: a width-8
verify builds in 3.6 ms and evaluates in 5.8 on a slow H100). Classic decode overlaps
the two (mlx-lm's pipelining: the next step is queued before the current token is
read). Arms, in one loaded engine:
- "before": the shipped round;
- "split": the verify's hidden state queued (`mx.async_eval`) after target layers
  CUTS, so the device starts on the first layers while the host builds the rest;
- "early": the drafts queued as soon as they are built (session 23's early draft);
- "both": split and early.
Then `ab.alternate_rounds` (RUNS runs), after checking that "both" decodes the 12
held-out prompts as classic decode does. Prints the rounds' lines.
argv: runs (default 6)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from typing import Any

import mlx.core as mx
from ab import alternate_rounds, decodes_as_classic, width8_engine

from drafter.speculative import Round, Session

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 6
CUTS = (9, 19)  # layers no capture hook taps (the default pair taps 1, 8, 14, 20, 27)
PLAIN_OPEN = Session.open

engine = width8_engine()
layers = engine.model.model.layers
plain_classes = {i: type(layers[i]) for i in CUTS}


def cut_class(cls: type) -> type:
    def __call__(self: Any, x: mx.array, *args: Any, **kwargs: Any) -> mx.array:
        out = cls.__call__(self, x, *args, **kwargs)
        if out.shape[1] > 1:  # a verify block, not a one-row step or a prefill's
            mx.async_eval(out)
        return out

    return type("Cut" + cls.__name__, (cls,), {"__call__": __call__})


cut_classes = {i: cut_class(cls) for i, cls in plain_classes.items()}


def early_open(self: Session, *args: Any, **kwargs: Any) -> Round:
    current = PLAIN_OPEN(self, *args, **kwargs)
    mx.async_eval(current.drafts)
    return current


def use(arm: str) -> None:
    for i in CUTS:
        layers[i].__class__ = cut_classes[i] if arm in ("split", "both") else plain_classes[i]
    Session.open = early_open if arm in ("early", "both") else PLAIN_OPEN  # type: ignore[method-assign]


exact = decodes_as_classic(engine, use, "both")
if exact:
    arms: dict[str, Callable[[], None]] = {
        arm: partial(use, arm) for arm in ("before", "split", "early", "both")
    }
    for run in range(RUNS):
        print(f"rounds run {run}", flush=True)
        alternate_rounds(engine, arms, 8)
use("before")
