"""The bench's prompt files are derived from scripts/make_train_data.py, which the
training script evaluates the drafter with: short_prompts.json from its SHORT_PROMPTS,
heldout_prompts.json from its held-out split. They must not drift apart."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from server.cli import parse_args
from server.tooling.bench import (
    HELD_OUT_PROMPTS_FILE,
    SHORT_PROMPTS_FILE,
    BenchError,
    config_from_args,
    read_prompts_file,
)

ROOT = Path(__file__).resolve().parents[3]


def make_train_data() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_train_data", ROOT / "scripts" / "make_train_data.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_short_prompts_file_serves_short_prompts_in_order_chat_as_chatml() -> None:
    source = make_train_data().SHORT_PROMPTS
    served = json.loads(SHORT_PROMPTS_FILE.read_text())
    assert served["kinds"] == [kind for kind, _ in source]
    expected = [
        f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n" if kind == "chat" else text
        for kind, text in source
    ]
    assert served["prompts"] == expected


def test_the_bench_reads_the_short_prompts_file() -> None:
    read = read_prompts_file(str(SHORT_PROMPTS_FILE))
    assert len(read.prompts) == len(make_train_data().SHORT_PROMPTS) == 22
    assert read.kinds == tuple(kind for kind, _ in make_train_data().SHORT_PROMPTS)


def test_the_held_out_prompts_file_is_the_splits_first_prompts_of_each_kind() -> None:
    served = json.loads(HELD_OUT_PROMPTS_FILE.read_text())
    per_kind = served["kinds"].count("code")
    assert served == make_train_data().held_out_file(per_kind)
    assert sorted(set(served["kinds"])) == ["chat", "code", "prose"]
    assert [served["kinds"].count(kind) for kind in ("prose", "chat")] == [per_kind, per_kind]


def test_per_kind_benches_the_held_out_splits_first_n_prompts_of_each_kind() -> None:
    args = parse_args(["bench", "--prompts-file", str(HELD_OUT_PROMPTS_FILE), "--per-kind", "3"])
    config = config_from_args(args)
    expected = make_train_data().held_out_file(3)
    assert list(config.prompts) == expected["prompts"]
    assert list(config.prompt_kinds or ()) == expected["kinds"]


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ([], "--per-kind needs a --prompts-file"),
        (["--prompt", "def f():"], "--per-kind needs a --prompts-file"),
    ],
)
def test_per_kind_without_a_prompts_file_is_an_error_naming_it(
    extra: list[str], problem: str
) -> None:
    args = parse_args(["bench", "--per-kind", "2", *extra])
    with pytest.raises(BenchError, match=problem):
        config_from_args(args)


def test_per_kind_needs_a_prompts_file_that_names_kinds(tmp_path: Path) -> None:
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps({"prompts": ["a", "b"]}))
    args = parse_args(["bench", "--prompts-file", str(path), "--per-kind", "1"])
    with pytest.raises(BenchError, match="--per-kind needs a --prompts-file that names"):
        config_from_args(args)


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_a_per_kind_below_one_stops_the_command_naming_it(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_args(["bench", "--per-kind", value])
    assert "--per-kind" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ({"prompts": ["a", "b"], "kinds": ["code"]}, "'kinds' must name one kind per prompt (2)"),
        ({"prompts": ["a"], "kinds": [""]}, "'kinds' must name one kind per prompt (1)"),
        ({"prompts": []}, "'prompts' must be a non-empty list"),
        ({"kinds": ["code"]}, "'prompts'"),
    ],
)
def test_a_malformed_prompts_file_is_an_error_naming_the_file(
    tmp_path: Path, content: dict, problem: str
) -> None:
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(content))
    with pytest.raises(argparse.ArgumentTypeError, match=f"--prompts-file {path}: .*") as error:
        read_prompts_file(str(path))
    assert problem in str(error.value)
