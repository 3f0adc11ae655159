"""scripts/compare_rounds.py reads round_emits files and reports each drafter against the
first: pooled and per-prompt figures over all rounds and before the EOS, and which prompts
moved before the EOS; files of other prompts are refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"summary": {}, "prompts": rows}))
    return path


def _run(*paths: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "scripts/compare_rounds.py", *map(str, paths)]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)


def _row(kind: str, prompt: str, emitted: list[int], eos_round: int | None) -> dict[str, Any]:
    return {"kind": kind, "width": 4, "prompt": prompt, "emitted": emitted, "eos_round": eos_round}


def test_it_reports_before_eos_figures_and_the_prompts_that_moved(tmp_path: Path) -> None:
    base = _write(
        tmp_path / "base.json",
        [_row("code", "a", [1, 4, 2], None), _row("chat", "b", [1, 2, 2, 1, 1], 2)],
    )
    # round 0 is the prefill's token; "b" ends at round 2, so its rounds past it are not
    # read before the EOS: base before EOS = [4, 2] and [2, 2]
    better = _write(
        tmp_path / "better.json",
        [_row("code", "a", [1, 4, 2], None), _row("chat", "b", [1, 3, 1, 4, 4], 2)],
    )
    result = _run(base, better)
    assert result.returncode == 0, result.stderr
    lines = {line.split(" | ")[0].lstrip("| "): line for line in result.stdout.splitlines()}
    assert lines["pooled, before EOS (rounds)"].endswith("| 2.500 (4) | 2.500 (4) |")
    assert lines["pooled, all rounds"].endswith("| 2.000 | 3.000 |")  # 12/6 and 18/6
    assert lines["per prompt, all rounds (range)"].endswith(
        "| 2.250 (1.50-3.00) | 3.000 (3.00-3.00) |"
    )
    moved = lines["prompts up/equal/down before EOS (code, chat)"]
    assert moved.endswith("| - | 0/1/0, 0/1/0 |")  # chat's [3, 1] averages what [2, 2] did
    worse = _write(
        tmp_path / "worse.json",
        [_row("code", "a", [1, 2, 2, 2], None), _row("chat", "b", [1, 1, 1, 1, 1, 1], None)],
    )
    result = _run(base, worse)
    assert result.stdout.splitlines()[-1].endswith("| - | 0/0/1, 0/0/1 |")


def test_a_file_of_other_prompts_is_refused_naming_it(tmp_path: Path) -> None:
    base = _write(tmp_path / "base.json", [_row("code", "a", [1, 4], None)])
    other = _write(tmp_path / "other.json", [_row("code", "z", [1, 4], None)])
    result = _run(base, other)
    assert result.returncode == 2
    assert str(other) in result.stderr and result.stdout == ""
