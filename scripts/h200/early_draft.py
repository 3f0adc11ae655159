"""H200: does starting the draft before the verify is built make the round cheaper?

Arm "before" is ab309e9's `Session.open` (`before/speculative_ab309e9.py`, written with
`git show ab309e9:drafter/speculative.py`): the draft is evaluated with the verify, at
the round's one host sync. Arm "after" is this tree's: `mx.async_eval` of the drafts
as soon as their graph is built, so the device drafts while the host builds the verify
forward. Same values, same syncs. argv: n (default 10), tokens (default 128)."""

from __future__ import annotations

import sys
from pathlib import Path

from drafter.speculative import Session
from scripts.h200.ab import alternate, module_from, width8_engine

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10
TOKENS = int(sys.argv[2]) if len(sys.argv) > 2 else 128

old_open = module_from(Path("before/speculative_ab309e9.py"), "before_speculative").Session.open
new_open = Session.open


def use(open_round: object) -> None:
    Session.open = open_round  # type: ignore[method-assign]


arms = {"before": lambda: use(old_open), "after": lambda: use(new_open)}
alternate(width8_engine(), arms, N, TOKENS)
