"""`draftwise profile --json` runs the real round loop on a real pair from disk and reports
one object per width with the fields the round-cost issue names and every stage timed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from drafter.checkpoints.tiny import write_tiny_model
from drafter.dflash import write_random_drafter

REPO = Path(__file__).resolve().parents[3]
FIELDS = {"stages_ms", "round_ms", "verify_ms", "draft_ms", "step_ms", "width", "rounds"}
FIELDS |= {"acceptance_length", "backend"}


def profile_command(tmp_path: Path, widths: str, max_tokens: int) -> list[str]:
    """`draftwise profile --json` over a tiny random pair written under tmp_path."""
    target = write_tiny_model(tmp_path / "target", "qwen3")
    drafter = write_random_drafter(tmp_path / "drafter", target)
    command = [sys.executable, "-m", "server.cli", "profile", "--json", "--width", widths]
    command += ["--model", str(target), "--draft-model", str(drafter)]
    command += ["--max-tokens", str(max_tokens), "--repeats", "1"]
    return [*command, "--cache-dir", str(tmp_path / "cache")]


def test_profile_json_gives_one_object_per_width_with_the_named_fields(tmp_path: Path) -> None:
    command = profile_command(tmp_path, "2,4", 12)
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [row["width"] for row in rows] == [2, 4]
    for row in rows:
        assert set(row) >= FIELDS
        assert row["backend"] == "cpu" and row["rounds"] > 0
        assert {"draft", "verify", "choose", "sync", "rollback", "rest"} <= set(row["stages_ms"])
        assert all(ms >= 0 for ms in row["stages_ms"].values())
        assert row["round_ms"] > 0 and row["step_ms"] > 0
        assert row["acceptance_length"] >= 1.0
        # As served, the loaded pair is out of the collector; its full passes are timed.
        assert row["heap"] == "frozen"
        assert all(ms >= 0 for ms in row["full_collections_ms"])
        # Every timed round is placed by the target's cached rows after it. Here one
        # request: they rise every round (rollback keeps the accepted rows, at least one).
        keys = row["round_keys"]
        assert len(keys) == len(row["round_times_ms"]) > 0
        assert all(a < b for a, b in zip(keys, keys[1:], strict=False))
        # and by its thread's CPU time (never above the round's wall time: one thread)
        # and involuntary context switches
        cpu, wall = row["round_cpu_ms"], row["round_times_ms"]
        assert len(cpu) == len(row["round_preempted"]) == len(wall)
        assert all(0 < c <= w + 0.5 for c, w in zip(cpu, wall, strict=True))
        assert all(n >= 0 for n in row["round_preempted"])


def test_profile_batch_times_classic_steps_of_both_engines_in_alternating_passes(
    tmp_path: Path,
) -> None:
    command = [*profile_command(tmp_path, "2", 6), "--batch", "3", "--repeats", "2"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    (row,) = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert (row["batch"], row["steps"], row["backend"]) == (3, 6, "cpu")
    assert len(row["speculative_ms"]) == len(row["classic_ms"]) == 2
    assert all(ms > 0 for ms in row["speculative_ms"] + row["classic_ms"])


def test_profile_batch_of_one_request_is_refused_naming_the_flag(tmp_path: Path) -> None:
    command = [*profile_command(tmp_path, "2", 6), "--batch", "1"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "invalid --batch 1" in result.stderr


def test_profile_with_a_bad_blas_setting_stops_naming_it_before_loading_anything(
    tmp_path: Path,
) -> None:
    command = [sys.executable, "-m", "server.cli", "profile", "--json", "--width", "2"]
    command += ["--model", str(tmp_path / "absent"), "--draft-model", str(tmp_path / "absent")]
    env = {"PATH": "/usr/bin:/bin", "DRAFTWISE_BLAS": "fast"}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: invalid setting") and "DRAFTWISE_BLAS='fast'" in line


def test_profile_with_warm_up_runs_the_servers_warm_up_first_and_says_how_long(
    tmp_path: Path,
) -> None:
    command = profile_command(tmp_path, "2", 8)
    plain = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    warmed = subprocess.run(
        [*command, "--warm-up"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert plain.returncode == 0 and warmed.returncode == 0, plain.stderr + warmed.stderr
    assert json.loads(plain.stdout.splitlines()[-1])["warm_up_s"] is None
    assert json.loads(warmed.stdout.splitlines()[-1])["warm_up_s"] > 0
