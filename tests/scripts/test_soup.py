"""scripts/soup.py averages drafters of one shape into one the real loader takes, and
refuses drafters of different shapes without writing anything."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
from mlx_lm import load

from drafter.checkpoints.tiny import write_tiny_model
from drafter.dflash import DRAFT_VOCAB_FILE, load_drafter, read_weights, write_random_drafter

REPO = Path(__file__).resolve().parents[2]


def soup(tmp_path: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "scripts/soup.py", "--out", str(out), *args]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_a_soup_is_the_mean_of_its_drafters_and_loads_with_the_vocabulary_asked_for(
    tmp_path: Path,
) -> None:
    target = write_tiny_model(tmp_path / "target", "qwen3")
    a = write_random_drafter(tmp_path / "a", target, seed=1)
    b = write_random_drafter(tmp_path / "b", target, seed=2)
    vocab_dir = tmp_path / "vocab"
    vocab_dir.mkdir()
    (vocab_dir / DRAFT_VOCAB_FILE).write_text(json.dumps({"token_ids": [5, 9, 3, 7]}))

    out = tmp_path / "soup"
    result = soup(tmp_path, out, str(a), str(b), "--vocab-from", str(vocab_dir))
    assert result.returncode == 0, result.stderr

    mixed, wa, wb = read_weights(out), read_weights(a), read_weights(b)
    assert mixed.keys() == wa.keys()
    for name, w in mixed.items():
        mean = ((wa[name].astype(mx.float32) + wb[name].astype(mx.float32)) / 2).astype(w.dtype)
        assert w.dtype == wa[name].dtype and mx.array_equal(w, mean).item(), name
    assert any(not mx.array_equal(w, wa[n]).item() for n, w in mixed.items())  # not a copy
    model, _ = load(str(target))
    drafter = load_drafter(out, model)
    assert drafter.head_tokens == 4  # the vocabulary from --vocab-from


def test_drafters_of_different_shapes_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    target = write_tiny_model(tmp_path / "target", "qwen3")
    one = write_random_drafter(tmp_path / "one", target, num_layers=1)
    two = write_random_drafter(tmp_path / "two", target, num_layers=2)
    out = tmp_path / "soup"
    result = soup(tmp_path, out, str(one), str(two))
    assert result.returncode != 0
    assert "config.json files differ" in result.stderr
    assert not out.exists()
