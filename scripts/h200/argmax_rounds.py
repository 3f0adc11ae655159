"""Round by round: the greedy choice over the scores against d3d5890's log-softmax choice.

`argmax.py` compares `draftwise profile` medians, which pool two requests per
measurement and hid a 2-3 ms change on this CPU in their noise; this runs
`ab.alternate_rounds` with the same two arms (`Session.judge` swapped).
argv: width (default 4)."""

from __future__ import annotations

import sys
from pathlib import Path

from ab import alternate_rounds, module_from, width8_engine

from drafter.speculative import Session

WIDTH = int(sys.argv[1]) if len(sys.argv) > 1 else 4
old = module_from(Path("before/speculative_d3d5890.py"), "before_speculative")
new_judge = Session.judge


def before() -> None:
    Session.judge = old.Session.judge  # type: ignore[method-assign]
    Session.row_logprobs = old.Session.row_logprobs  # type: ignore[attr-defined]


def after() -> None:
    Session.judge = new_judge  # type: ignore[method-assign]


alternate_rounds(width8_engine(), {"before": before, "after": after}, WIDTH)
