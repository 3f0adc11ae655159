"""`load_engine` with `freeze_heap`: what a serving process loaded leaves the cyclic
garbage collector, so a full collection during decode does not walk the models; and on
the CPU glibc keeps freed memory, so a forward's temporaries are not faulted in anew."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from drafter.activation import calls_mlx_swiglu, plain_class
from drafter.checkpoints.tiny import write_tiny_model
from drafter.dflash import write_random_drafter
from drafter.kernels import backend_bundle
from drafter.loading import LoadOptions, load_engine


@pytest.fixture
def restore_heap() -> Iterator[None]:
    yield
    gc.unfreeze()  # give the test process's objects back to the collector


def walked_by_full_collection(obj: object) -> bool:
    return id(obj) in {id(o) for o in gc.get_objects()}


@pytest.mark.parametrize("freeze", [True, False])
def test_a_frozen_load_keeps_the_models_out_of_full_collections(
    tmp_path: Path, freeze: bool, restore_heap: None
) -> None:
    target = write_tiny_model(tmp_path / "target", "qwen3")
    drafter = write_random_drafter(tmp_path / "drafter", target)
    options = LoadOptions(
        cache_dir=tmp_path / "cache",
        model=str(target),
        draft_model=str(drafter),
        draft_block_size="2",
        exactness="off",
        freeze_heap=freeze,
    )
    frozen_before = gc.get_freeze_count()
    engine = load_engine(options).engine
    assert engine.drafter is not None
    for loaded in (engine.model, engine.drafter, engine.tokenizer):
        assert walked_by_full_collection(loaded) is not freeze
    assert (gc.get_freeze_count() > frozen_before) is freeze


def test_a_load_checks_its_prompt_cache_hits_and_reports_their_step(tmp_path: Path) -> None:
    """A float32 target on this CPU computes a prompt row the same in any forward, so
    its hits take any shared prefix (step 1); the step goes into dflash.config."""
    target = write_tiny_model(tmp_path / "target", "qwen3")
    options = LoadOptions(
        cache_dir=tmp_path / "cache",
        model=str(target),
        draft_model="none",
        prompt_cache_bytes=1 << 20,
    )
    loaded = load_engine(options)
    assert loaded.engine.prompt_cache is not None
    assert loaded.engine.prompt_cache.step == 1
    assert loaded.speculative_config()["prompt_cache_step"] == 1
    off = load_engine(LoadOptions(tmp_path / "cache", str(target), "none", prompt_cache_bytes=0))
    assert off.speculative_config()["prompt_cache_step"] is None


@pytest.mark.parametrize("asked", [None, "mlx", "polyexp", "prefill"])
def test_a_load_puts_the_target_in_the_activation_asked_for(
    tmp_path: Path, asked: str | None
) -> None:
    """None leaves the choice to the backend's bundle (classic here: no drafter); the engine
    reports the mode in force and the target's feed-forward layers are in it."""
    target = write_tiny_model(tmp_path / "target", "qwen3")
    options = LoadOptions(tmp_path / "cache", str(target), "none", activation=asked)
    engine = load_engine(options).engine
    expected = backend_bundle().kernels.activation if asked is None else asked
    assert engine.activation == expected
    modules = engine.model.modules()
    plain = {id(m): plain_class(type(m)) for m in modules}
    feed_forward = [m for m in modules if calls_mlx_swiglu(plain[id(m)])]
    assert feed_forward
    hooked = [type(m) is not plain[id(m)] for m in feed_forward]
    assert all(hooked) if expected in ("polyexp", "prefill") else not any(hooked)


FAULTS_PER_CALL = """
import resource, sys
import mlx.core as mx
from drafter import polyexp
from drafter.loading import keep_freed_memory
if sys.argv[1] == "kept":
    assert keep_freed_memory()
gate, x = mx.random.normal((1024, 1536)), mx.random.normal((1024, 1536))
mx.eval(polyexp.swiglu(gate, x))
start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    mx.eval(polyexp.swiglu(gate, x))
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start) / 5)
"""


def faults_per_call(arm: str) -> float:
    """Page faults per evaluation of a 1,024-row SwiGLU (6 MB temporaries), in a fresh
    process: malloc's settings are the whole process's."""
    done = subprocess.run(
        [sys.executable, "-c", FAULTS_PER_CALL, arm], capture_output=True, text=True, check=True
    )
    return float(done.stdout.strip())


def test_kept_freed_memory_spares_a_repeated_forward_its_page_faults() -> None:
    default, kept = faults_per_call("glibc"), faults_per_call("kept")
    assert default > 1000  # each call maps its temporaries anew and faults them in
    assert kept < default / 20
