"""H200: does a greedy choice over the scores (no log-softmax) make the round cheaper?

Arm "before" is d3d5890: a greedy row is chosen as the argmax of its log-softmax, and the
log-softmax rows are evaluated with the choice (the round's `judge` and the classic
step, from `before/*_d3d5890.py`, written with `git show d3d5890:drafter/X.py`). Arm
"after" is this tree: the argmax of the scores, the log-softmax left unevaluated unless
the request reports logprobs. The tokens are the same in both arms (the acceptance
column shows it). argv: n (default 10), tokens (default 128), width (default 8; this
CPU's policy width is 4)."""

from __future__ import annotations

import sys
from pathlib import Path

from ab import alternate, module_from, width8_engine

from drafter.engine import Engine
from drafter.speculative import Session

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10
TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 128
WIDTH = int(sys.argv[3]) if len(sys.argv) > 3 else 8

old_engine = module_from(Path("before/engine_d3d5890.py"), "before_engine")
old_speculative = module_from(Path("before/speculative_d3d5890.py"), "before_speculative")
new = (Engine.classic_generate, Session.judge, Session.prefill_chunks)


def before() -> None:
    Engine.classic_generate = old_engine.Engine.classic_generate  # type: ignore[method-assign]
    Session.judge = old_speculative.Session.judge  # type: ignore[method-assign]
    Session.prefill_chunks = old_speculative.Session.prefill_chunks  # type: ignore[method-assign]
    Session.row_logprobs = old_speculative.Session.row_logprobs  # type: ignore[attr-defined]


def after() -> None:
    Engine.classic_generate, Session.judge, Session.prefill_chunks = new  # type: ignore[method-assign]


alternate(width8_engine(), {"before": before, "after": after}, N, TOKENS, WIDTH)
