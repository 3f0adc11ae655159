"""A tiny target of each architecture with a random DFlash drafter, loaded from disk
through the real loaders; modules that decode with one share it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mlx_lm import load

from drafter.checkpoints.tiny import write_tiny_model
from drafter.dflash import DFlashDrafter, load_drafter, write_random_drafter

ARCHITECTURES = ["qwen3", "qwen3_5"]


@dataclass
class Pair:
    arch: str
    model: Any
    tokenizer: Any
    drafter: DFlashDrafter


def load_pair(root: Path, arch: str, target_seed: int, drafter_seed: int) -> Pair:
    target_dir = write_tiny_model(root / "target", arch, seed=target_seed)
    model, tokenizer = load(str(target_dir))
    drafter_dir = write_random_drafter(
        root / "drafter", target_dir, num_layers=1, seed=drafter_seed
    )
    return Pair(arch, model, tokenizer, load_drafter(drafter_dir, model))


def engine_on(pair: Pair, **modes: Any) -> Any:
    """An engine on `pair` at width 4 with its drafter; `modes`: the Engine's keyword
    arguments (attention, linear, activation)."""
    from drafter.engine import Engine

    return Engine(
        pair.model,
        pair.tokenizer,
        model_id="tiny",
        context_length=2048,
        drafter=pair.drafter,
        block_size=4,
        **modes,
    )


@pytest.fixture(scope="module", params=ARCHITECTURES)
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Pair:
    """Target seed 2, drafter seed 3: one per test module and architecture."""
    return load_pair(tmp_path_factory.mktemp(request.param), request.param, 2, 3)
