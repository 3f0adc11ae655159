"""Summarise an in-process A/B file (`ab.alternate`'s JSON lines, arms "before" and
"after"): each figure's median (min, max) per arm and the passes in which "after" was
cheaper. argv: the JSONL path."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

lines = Path(sys.argv[1]).read_text().splitlines()
rows = [json.loads(line) for line in lines if line.startswith('{"arm"')]
for key in ("round_ms", "draft_ms", "verify_ms", "step_ms"):
    by = {a: [r[key] for r in rows if r["arm"] == a] for a in ("before", "after")}
    wins = sum(a < b for a, b in zip(by["after"], by["before"], strict=True))
    figures = {
        a: (round(statistics.median(v), 3), round(min(v), 3), round(max(v), 3))
        for a, v in by.items()
        if v
    }
    print(key, figures, f"after cheaper in {wins} of {len(by['after'])}")
