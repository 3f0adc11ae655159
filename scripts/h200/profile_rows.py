"""Print the rows of a tagged `draftwise profile --json` file, one line each.

The H200 scripts wrap each profile object as {"<tag>": ..., "p": {...}} (the tags say
which arm, target or drafter it was). Each line gives the tags, then the round's
figures and `x`, the in-process speed-up (acceptance x one-row step / round).

    python3 scripts/h200/profile_rows.py $OUT/profile.jsonl
"""

from __future__ import annotations

import json
import sys


def describe(row: dict) -> str:
    p = row["p"]
    tags = [str(value) for key, value in row.items() if key != "p"]
    speed = p["acceptance_length"] * p["step_ms"] / p["round_ms"]
    figures = {
        "attention": p["attention"],
        "linear": p["linear"],
        "w": p["width"],
        "round": p["round_ms"],
        "cold": p["round_ms_cold"],
        "verify": p["verify_ms"],
        "draft": p["draft_ms"],
        "step": p["step_ms"],
        "acc": p["acceptance_length"],
        "x": round(speed, 2),
        "max": p["max_round_ms"],
        "over2x": p["rounds_over_2x_median"],
        "rest": p["rest_share"],
        "stages": p["stages_ms"],
    }
    return " ".join(tags + [f"{key} {value}" for key, value in figures.items()])


if __name__ == "__main__":
    with open(sys.argv[1]) as rows:
        for line in rows:
            print(describe(json.loads(line)))
