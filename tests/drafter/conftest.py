"""A tiny target of each architecture with a random DFlash drafter, loaded from disk
through the real loaders; modules that decode with one share it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mlx_lm import load

from drafter.batch import BatchDecoder, run_together
from drafter.checkpoints.tiny import write_tiny_model
from drafter.decoding import GenerationStats
from drafter.dflash import DFlashDrafter, load_drafter, write_random_drafter
from drafter.engine import Engine
from drafter.sampling import SamplingParams

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


def engine_on(pair: Pair, drafter: Any = None, width: int | None = None, **modes: Any) -> Engine:
    """An engine on `pair`'s target: classic by default, speculative with `drafter` at
    `width`; `modes`: the Engine's attention, linear and activation (None: the device's).
    Modes swap layer classes of the shared model, so each engine made here sets them."""
    return Engine(
        pair.model,
        pair.tokenizer,
        model_id="tiny",
        context_length=2048,
        drafter=drafter,
        block_size=width,
        **modes,
    )


def batched_and_solo(
    engine: Engine, prompts: list[list[int]], tokens: int
) -> tuple[list[list[int]], list[list[int]]]:
    """Each prompt's greedy token ids decoded together through the served decoder, and
    each decoded alone."""
    params = SamplingParams()
    solo = [[t.id for s in engine.generate(p, tokens, params) for t in s] for p in prompts]
    decoder = BatchDecoder(engine)
    sequences = [decoder.start(p, tokens, params, GenerationStats()) for p in prompts]
    together = [[t.id for t in out] for out in run_together(decoder, sequences)]
    return together, solo


@pytest.fixture(scope="module", params=ARCHITECTURES)
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Pair:
    """Target seed 2, drafter seed 3: one per test module and architecture."""
    return load_pair(tmp_path_factory.mktemp(request.param), request.param, 2, 3)
