"""scripts/round_emits.py runs the real engine on a real pair from disk and accounts for
every token: each prompt's rounds add up to the tokens asked for, none above the width."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from drafter.checkpoints.tiny import write_tiny_model
from drafter.dflash import write_random_drafter

REPO = Path(__file__).resolve().parents[2]


def test_every_round_is_counted_and_the_summary_is_per_kind(tmp_path: Path) -> None:
    target = write_tiny_model(tmp_path / "target", "qwen3")
    drafter = write_random_drafter(tmp_path / "drafter", target)
    prompts = tmp_path / "prompts.json"
    spec = {"kinds": ["code", "prose", "code"], "prompts": ["def f(x):", "Once upon", "x = 1"]}
    prompts.write_text(json.dumps(spec))
    out = tmp_path / "rounds.json"
    command = [sys.executable, "scripts/round_emits.py", "--width", "4", "--tokens", "10"]
    command += ["--model", str(target), "--draft-model", str(drafter)]
    command += ["--prompts-file", str(prompts), "--out", str(out)]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    record = json.loads(out.read_text())
    assert [row["prompt"] for row in record["prompts"]] == spec["prompts"]
    for row in record["prompts"]:
        assert sum(row["emitted"]) == 10
        assert all(1 <= n <= 4 for n in row["emitted"])
    assert set(record["summary"]) == {"code", "prose", "all"}
    code = record["summary"]["code"]
    rounds = sum(len(r["emitted"]) - 1 for r in record["prompts"] if r["kind"] == "code")
    assert code["rounds"] == rounds
    assert 0.0 <= code["no_draft_accepted"] <= 1.0 and code["tokens_per_round"] >= 1.0
    for row in record["prompts"]:  # a random tiny model: an EOS may come anywhere or never
        assert row["eos_round"] is None or 0 <= row["eos_round"] < len(row["emitted"])
    early = [r for r in record["prompts"] if r["kind"] == "code"]
    ends = [len(r["emitted"]) if r["eos_round"] is None else r["eos_round"] + 1 for r in early]
    early_rounds = sum(end - 1 for end in ends)
    assert code["before_eos"]["rounds"] == early_rounds
    per_prompt = [sum(r["emitted"][1:]) / (len(r["emitted"]) - 1) for r in record["prompts"]]
    assert record["summary"]["all"]["per_prompt"]["all"] == round(sum(per_prompt) / 3, 3)


def test_a_malformed_prompts_file_stops_it_naming_the_file(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps({"kinds": ["code"], "prompts": ["a", "b"]}))
    command = [sys.executable, "scripts/round_emits.py", "--prompts-file", str(prompts)]
    command += ["--out", str(tmp_path / "rounds.json")]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert f"--prompts-file {prompts}" in result.stderr and "'kinds'" in result.stderr
    assert not (tmp_path / "rounds.json").exists()


def test_the_summary_counts_rounds_up_to_each_prompts_first_eos(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(REPO / "scripts"))  # undone after the test
    from round_emits import summary

    rows = [  # round 0 is the prefill's token, never counted
        {"kind": "chat", "width": 4, "emitted": [1, 4, 2, 1, 1], "eos_round": 2},
        {"kind": "chat", "width": 4, "emitted": [1, 3, 3], "eos_round": None},
    ]
    chat = summary(rows)["chat"]
    assert chat["rounds"] == 6 and chat["tokens_per_round"] == round(14 / 6, 3)
    assert chat["before_eos"]["rounds"] == 4  # [4, 2] and [3, 3]
    assert chat["before_eos"]["tokens_per_round"] == 3.0
    assert chat["before_eos"]["all_accepted"] == 0.25
    assert chat["per_prompt"] == {"all": round((8 / 4 + 3.0) / 2, 3), "before_eos": 3.0}
