"""Model directories appear whole or not at all; config fields are found where
multimodal checkpoints nest them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from drafter.files import config_value, read_config, text_config, write_dir_atomically


def write_config(value: int) -> Callable[[Path], None]:
    def fill(staging: Path) -> None:
        (staging / "config.json").write_text(json.dumps({"value": value}))

    return fill


def test_a_written_directory_replaces_the_old_one_whole(tmp_path: Path) -> None:
    target = tmp_path / "model"
    write_dir_atomically(target, write_config(1))
    write_dir_atomically(target, write_config(2))
    assert read_config(target) == {"value": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no staging left behind
    assert target.stat().st_mode & 0o755 == 0o755


def test_a_failed_write_leaves_the_old_directory_and_no_staging(tmp_path: Path) -> None:
    target = tmp_path / "model"
    write_dir_atomically(target, write_config(1))

    def broken(staging: Path) -> None:
        (staging / "config.json").write_text("{")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_dir_atomically(target, broken)
    assert read_config(target) == {"value": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_without_replace_a_directory_that_won_the_race_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "model"

    def racing(staging: Path) -> None:
        write_config(2)(staging)
        write_dir_atomically(target, write_config(1))  # another writer finishes first

    write_dir_atomically(target, racing, replace=False)
    assert read_config(target) == {"value": 1}


def test_config_values_are_read_at_the_top_then_under_text_config() -> None:
    nested = {"model_type": "qwen3_5", "text_config": {"hidden_size": 64, "vocab_size": 9}}
    assert config_value(nested, "hidden_size") == 64
    assert config_value({**nested, "hidden_size": 32}, "hidden_size") == 32
    assert config_value(nested, "missing", "vocab_size") == 9
    assert config_value(nested, "missing") is None
    assert text_config(nested) == nested["text_config"]
    assert text_config({"hidden_size": 1}) == {"hidden_size": 1}
