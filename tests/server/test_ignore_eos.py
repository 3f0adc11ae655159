"""The worker's scheduler on both engine paths (classic and speculative): ignore_eos, and
the width decision's log line."""

from __future__ import annotations

import asyncio
import queue
import time
from pathlib import Path

import pytest
import structlog
from mlx_lm import load

from drafter.checkpoints.tiny import EOS, VOCAB, write_tiny_model
from drafter.dflash import load_drafter, write_random_drafter
from drafter.engine import Engine
from drafter.sampling import SamplingParams
from server.events import ChoicePlan, Chunk, CompletionPlan, Done, Event, Finished, Job
from server.metrics import Metrics
from server.scheduler import Scheduler

EOS_ID = VOCAB - 1
ALWAYS_EOS = SamplingParams(temperature=0.0, logit_bias={EOS_ID: 100.0})


def make_engine(root: Path, speculative: bool) -> Engine:
    target_dir = write_tiny_model(root / "target", "qwen3", seed=2)
    model, tokenizer = load(str(target_dir))
    drafter = width = None
    if speculative:
        drafter_dir = write_random_drafter(root / "drafter", target_dir, num_layers=1, seed=3)
        drafter, width = load_drafter(drafter_dir, model), 4
    return Engine(
        model, tokenizer, model_id="t", context_length=2048, drafter=drafter, block_size=width
    )


@pytest.fixture(scope="module", params=["classic", "speculative"])
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return make_engine(tmp_path_factory.mktemp("ignore-eos"), request.param == "speculative")


def run(engine: Engine, plan: CompletionPlan) -> list[Event]:
    """One job through the real scheduler, as the worker runs it; its events in order."""
    loop = asyncio.new_event_loop()
    try:
        job = Job("test", plan, loop, deadline=time.monotonic() + 60)
        jobs: queue.Queue[Job | None] = queue.Queue()
        jobs.put(job)
        jobs.put(None)  # then stop, as the worker's shutdown does
        Scheduler(
            engine, jobs, max_batch_size=4, metrics=Metrics(), on_job_end=lambda _: None
        ).run()
        loop.run_until_complete(asyncio.sleep(0))  # deliver what the worker handed over
        events = []
        while not job.events.empty():
            events.append(job.events.get_nowait())
        return events
    finally:
        loop.close()


def complete(engine: Engine, ignore_eos: bool, max_tokens: int = 6) -> tuple[str, Finished]:
    plan = CompletionPlan(
        prompts=[list(b"ab")],
        choices=[ChoicePlan(0, 0, ALWAYS_EOS)],
        max_tokens=max_tokens,
        ignore_eos=ignore_eos,
    )
    events = run(engine, plan)
    assert isinstance(events[-1], Done)
    text = "".join(e.text for e in events if isinstance(e, Chunk))
    (finished,) = [e for e in events if isinstance(e, Finished)]
    return text, finished


def test_eos_ends_the_choice_by_default(engine: Engine) -> None:
    text, finished = complete(engine, ignore_eos=False)
    assert (finished.finish_reason, finished.completion_tokens, text) == ("stop", 1, "")


def test_with_ignore_eos_generation_runs_to_max_tokens_and_eos_is_text(engine: Engine) -> None:
    text, finished = complete(engine, ignore_eos=True)
    assert (finished.finish_reason, finished.completion_tokens) == ("length", 6)
    assert text == EOS * 6


def test_the_width_log_line_gives_each_widths_estimate_and_cost(tmp_path: Path) -> None:
    """A speculative worker's first goodput decision logs `batch.width` with the tokens/s
    it expected and the ms per request it measured, for every width it explored."""
    engine = make_engine(tmp_path, speculative=True)
    with structlog.testing.capture_logs() as logs:
        complete(engine, ignore_eos=True, max_tokens=12)
    (line, *_) = [entry for entry in logs if entry["event"] == "batch.width"]
    assert set(line["ms_per_request"]) == set(line["tokens_per_s"]) == {"1", "2", "4"}
    assert all(ms > 0 for ms in line["ms_per_request"].values())
