"""Summarise an in-process A/B file (`ab.alternate`'s JSON lines): each figure's median
(min, max) per arm and, for every arm but "before", the passes in which it was cheaper
than "before". argv: the JSONL path; with `--lower-of A B` it prints instead only which
of arms A and B has the lower median round (an arm with no rows counts as endless;
a tie goes to B)."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

lines = Path(sys.argv[1]).read_text().splitlines()
rows = [json.loads(line) for line in lines if line.startswith('{"arm"')]
arms = list(dict.fromkeys(r["arm"] for r in rows))


def median_round(arm: str) -> float:
    times = [r["round_ms"] for r in rows if r["arm"] == arm]
    return statistics.median(times) if times else math.inf


if sys.argv[2:3] == ["--lower-of"]:
    first, second = sys.argv[3:5]
    print(first if median_round(first) < median_round(second) else second)
    sys.exit(0)
for key in ("round_ms", "draft_ms", "verify_ms", "step_ms"):
    by = {a: [r[key] for r in rows if r["arm"] == a] for a in arms}
    figures = {
        a: (round(statistics.median(v), 3), round(min(v), 3), round(max(v), 3))
        for a, v in by.items()
    }
    wins = []
    for arm in arms:
        if arm != "before":
            pairs = list(zip(by[arm], by["before"], strict=False))  # a cut-off run: uneven
            cheaper = sum(a < b for a, b in pairs)
            wins.append(f"{arm} cheaper in {cheaper} of {len(pairs)}")
    print(key, figures, "; ".join(wins))
