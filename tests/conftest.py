"""Fixtures shared across test packages: a tiny real model on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from drafter.checkpoints.tiny import ensure_tiny_model


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory shared by the session (generated models live here)."""
    return tmp_path_factory.mktemp("draftwise-cache")


@pytest.fixture(scope="session")
def tiny_model(model_cache: Path) -> Path:
    """The deterministic tiny random Qwen3 target, saved in mlx-lm's format."""
    return ensure_tiny_model(model_cache)
