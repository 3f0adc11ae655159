"""`draftwise bench --in-process`: a quick sweep in this process, widths interleaved.

Loads the pair once with the same loader the server uses, then runs
drafter.benchmark.measure_widths (the issue-4 benchmark core: classic and every
width interleaved inside each repetition, EOS ignored) and turns its samples
into the same record as the server sweep. Faster than one server per arm, but
it measures the engine, not the HTTP path.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from hashlib import sha256
from pathlib import Path
from typing import Any

from server.blas import reexec_with_openblas_if_available
from server.settings import default_cache_dir
from server.tooling.bench import (
    BenchConfig,
    BenchError,
    Progress,
    default_name,
    host_info,
    load_average,
    sweep_setup,
)
from server.tooling.bench_record import Arm, Request, Run, build_record

IN_PROCESS_MODE = "in-process (drafter.benchmark.measure_widths, arms interleaved per repetition)"


def use_chosen_blas(config: BenchConfig) -> str:
    """Before MLX loads: re-exec with OpenBLAS under --blas auto (no-op if already done)."""
    return reexec_with_openblas_if_available(sys.orig_argv, os.environ, config.blas == "bundled")


def arms_from_samples(
    samples: Sequence[Any], widths: Sequence[int | None], served: dict[str, Any]
) -> list[Arm]:
    """One Arm per width (None first); a Run per repetition, prompts in order."""
    arms = []
    for width in widths:
        mine = [s for s in samples if s.width == width]
        runs = []
        for repeat in sorted({s.repeat for s in mine}):
            picked = sorted((s for s in mine if s.repeat == repeat), key=lambda s: s.prompt_index)
            runs.append(Run(tuple(request_from_sample(s) for s in picked)))
        label = "classic" if width is None else f"width {width}"
        arm_served = {**served, "speculative": width is not None, "block_size": width}
        arms.append(Arm(label, width, runs, [], arm_served))
    return arms


def request_from_sample(sample: Any) -> Request:
    return Request(
        prompt_index=sample.prompt_index,
        tokens=sample.tokens,
        e2e_s=sample.seconds,
        ttft_s=sample.prefill_seconds,
        rounds=sample.rounds,
        drafted=sample.drafted,
        accepted=sample.accepted,
        sha256=sha256(sample.text.encode()).hexdigest(),
    )


def run_in_process(config: BenchConfig, progress: Progress) -> dict[str, Any]:
    """Load once, measure every arm interleaved, return the record (not yet written)."""
    from drafter.benchmark import measure_widths
    from drafter.loading import LoadOptions, load_engine

    if not config.widths:
        raise BenchError("need at least one width")
    started = datetime.now(UTC)
    cache_dir = Path(config.cache_dir) if config.cache_dir else default_cache_dir()
    options = LoadOptions(
        cache_dir=cache_dir,
        model=config.model,
        draft_model=config.draft_model,
        # Any width turns speculation on for loading; measure_widths sets each arm's width.
        draft_block_size=str(config.widths[0]),
        exactness="off",
        dtype=config.dtype or "auto",
    )
    host = host_info(os.environ)
    progress("loading the pair in this process")
    loaded = load_engine(options)
    if loaded.engine.drafter is None:
        raise BenchError("the pair has no drafter to measure (--draft-model none?)")
    served = {k: v for k, v in loaded.speculative_config().items() if k != "block_size"}
    served.update(source="bench --in-process", model_path=str(loaded.target_path))
    widths: list[int | None] = [None, *config.widths]
    progress(f"measuring classic and widths {list(config.widths)}, n={config.n}, interleaved")
    samples = measure_widths(
        loaded.engine,
        widths,
        list(config.prompts),
        config.max_tokens,
        config.n,
        warmup=config.warmup,
        on_progress=progress,
    )
    arms = arms_from_samples(samples, widths, served)
    host["load_average_end"] = load_average()
    setup = sweep_setup(config, served, started, IN_PROCESS_MODE)
    name = config.name or default_name(host, setup, started)
    record = build_record(name=name, arms=arms, setup=setup, host=host)
    record["warmup"] = config.warmup  # measure_widths runs them but does not return them
    return record
