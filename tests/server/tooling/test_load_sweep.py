"""The load sweep: arms named on the command line, one from another checkout, passes in
rotated order, and a real sweep over a tiny saved pair."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from drafter.checkpoints.tiny import write_tiny_model
from drafter.dflash import write_random_drafter
from server.tooling.load_sweep import Arm, main, parse_args, parse_arm, summary

REPO = Path(__file__).resolve().parents[3]


def test_an_arm_is_a_name_an_optional_tree_and_serve_flags() -> None:
    assert parse_arm("spec=") == Arm("spec", ())
    assert parse_arm("classic=--draft-model none --max-batch-size 4") == Arm(
        "classic", ("--draft-model", "none", "--max-batch-size", "4")
    )
    assert parse_arm(f"old@{REPO}=--log-level debug") == Arm("old", ("--log-level", "debug"), REPO)


@pytest.mark.parametrize("value", ["spec", "=--draft-model none", "two words=", "x@/nowhere="])
def test_a_bad_arm_is_refused_by_its_flag(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="--arm"):
        parse_arm(value)


def test_two_arms_of_one_name_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--arm", "a=", "--arm", "a=--draft-model none", "--output", "x"])
    assert "a given twice" in capsys.readouterr().err


def test_the_summary_is_each_arms_passes_median_and_range() -> None:
    runs = [{"clients": 8, "arm": "a", "tokens_per_second": t} for t in (10.0, 14.0, 12.0)] + [
        {"clients": 8, "arm": "b", "tokens_per_second": 9.0}
    ]
    assert summary(runs) == [
        {
            "clients": 8,
            "arm": "a",
            "tok_s": [10.0, 14.0, 12.0],
            "median": 12.0,
            "range": [10.0, 14.0],
        },
        {"clients": 8, "arm": "b", "tok_s": [9.0], "median": 9.0, "range": [9.0, 9.0]},
    ]


def checkout(root: Path) -> Path:
    """A copy of this checkout's packages whose serve entry says where it runs from."""
    for package in ("drafter", "policy", "server"):
        ignore = shutil.ignore_patterns("__pycache__", "*.safetensors")
        shutil.copytree(REPO / package, root / package, ignore=ignore)
    with (root / "server" / "tooling" / "lab.py").open("a") as entry:
        entry.write('\nprint("serve entry:", __file__, flush=True)\n')
    return root


def test_a_sweep_serves_every_arm_in_rotated_passes(tmp_path: Path) -> None:
    write_random_drafter(tmp_path / "drafter", write_tiny_model(tmp_path / "target"))
    tree = checkout(tmp_path / "tree")
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps({"prompts": ["def add(a, b):", "The sky is"]}))
    out = tmp_path / "record" / "sweep"
    common = f"--model {tmp_path / 'target'} --cache-dir {tmp_path / 'cache'} --exactness warn"
    code = main(
        [
            "--arm",
            f"spec=--draft-model {tmp_path / 'drafter'} --draft-block-size 2",
            "--arm",
            f"classic@{tree}=--draft-model none",
            *(f"--server-arg={flag}" for flag in common.split()),
            "--clients",
            "2",
            "--passes",
            "2",
            "--duration-s",
            "1",
            "--max-tokens",
            "4",
            "--prompts-file",
            str(prompts),
            "--output",
            str(out),
        ]
    )
    assert code == 0
    record = json.loads(out.with_suffix(".json").read_text())
    order = [(run["pass"], run["arm"]) for run in record["runs"]]
    assert order == [(0, "spec"), (0, "classic"), (1, "classic"), (1, "spec")]
    assert all(
        run["ok"] and run["counts_by_status"] == {"200": run["requests"]} for run in record["runs"]
    )
    assert record["servers"]["spec"]["speculative"]["block_size"] == 2
    assert record["servers"]["classic"]["speculative"]["speculative"] is False
    assert record["arms"]["classic"]["tree"] == str(tree)
    assert record["prompts"] == ["def add(a, b):", "The sky is"]
    logs = out.parent / ".sweep-logs"
    assert (
        f"serve entry: {tree / 'server' / 'tooling' / 'lab.py'}"
        in (logs / "classic.log").read_text()
    )
    assert "serve entry:" not in (logs / "spec.log").read_text()
    decisions = record["batch_metrics"]["2"]
    assert any(line.startswith("draftwise_batch_width_decisions") for line in decisions["spec"])
    assert "| 2 | spec |" in out.with_suffix(".md").read_text()
