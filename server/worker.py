"""The model worker: one thread that owns every piece of MLX state.

It loads the model, then takes jobs from a bounded queue one at a time. HTTP
handlers only submit jobs and read their events; results travel back to the
event loop with `loop.call_soon_threadsafe`. Between decoding rounds the
worker checks the job's cancel flag (client gone) and deadline (timeout).
"""

from __future__ import annotations

import asyncio
import enum
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from drafter.loading import Loaded
from server.generation import Chunk, CompletionPlan, Finished, Stopped, Usage, run_completion
from server.metrics import Metrics

log = structlog.get_logger("draftwise.worker")


class WorkerState(enum.StrEnum):
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"  # the model never loaded
    DEAD = "dead"  # the worker thread stopped unexpectedly
    STOPPED = "stopped"


class QueueFull(Exception):
    pass


class NotReady(Exception):
    pass


@dataclass(frozen=True)
class Done:
    usage: Usage


@dataclass(frozen=True)
class Failed:
    reason: str  # "cancelled", "timeout" or "error"
    message: str


Event = Chunk | Finished | Done | Failed


@dataclass(eq=False)
class Job:
    # eq=False: jobs are hashed by identity (the worker keeps a set of active ones)
    id: str
    plan: CompletionPlan
    loop: asyncio.AbstractEventLoop
    deadline: float  # time.monotonic() after which the job is abandoned
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    cancel_reason: str = "cancelled"
    admitted_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None  # when the worker took it

    def emit(self, event: Event) -> None:
        """Called on the worker thread; hands the event to the request's event loop."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:  # the loop closed: the server is gone, nobody is listening
            self.cancelled.set()

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop at the next round: 'cancelled' (client gone) or 'shutdown' (grace over)."""
        if not self.cancelled.is_set():
            self.cancel_reason = reason
            self.cancelled.set()

    def should_stop(self) -> str | None:
        if self.cancelled.is_set():
            return self.cancel_reason
        if time.monotonic() >= self.deadline:
            return "timeout"
        return None


class ModelWorker:
    def __init__(
        self,
        load: Callable[[], Loaded],
        max_queue_depth: int,
        metrics: Metrics,
        on_load_failed: Callable[[BaseException], None] | None = None,
        on_loaded: Callable[[Loaded], None] | None = None,
    ):
        self.load = load
        self.metrics = metrics
        self.on_load_failed = on_load_failed
        self.on_loaded = on_loaded
        self.jobs: queue.Queue[Job | None] = queue.Queue(maxsize=max_queue_depth)
        self.state = WorkerState.LOADING
        self.loaded: Loaded | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self.run, name="model-worker", daemon=True)
        self.active: set[Job] = set()  # admitted and not finished (queued or running)
        self.active_lock = threading.Lock()

    @property
    def ready(self) -> bool:
        return self.state == WorkerState.READY and self.thread.is_alive()

    @property
    def queue_depth(self) -> int:
        return self.jobs.qsize()

    @property
    def in_flight(self) -> int:
        """Jobs admitted and not yet finished: waiting in the queue or generating."""
        with self.active_lock:
            return len(self.active)

    def cancel_all(self, reason: str) -> int:
        """Cancel every admitted job; each stops within one round. Returns how many."""
        with self.active_lock:
            jobs = list(self.active)
        for job in jobs:
            job.cancel(reason)
        return len(jobs)

    def start(self) -> None:
        self.thread.start()

    def submit(self, job: Job) -> None:
        if not self.ready:
            raise NotReady(self.state.value)
        with self.active_lock:
            try:
                self.jobs.put_nowait(job)
            except queue.Full:
                self.metrics.rejections.labels(reason="queue_full").inc()
                raise QueueFull from None
            self.active.add(job)
        self.metrics.queue_depth.set(self.jobs.qsize())

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the thread to finish after the current job (used at shutdown)."""
        if self.thread.is_alive():
            try:
                self.jobs.put(None, timeout=timeout)
            except queue.Full:
                return
            self.thread.join(timeout)

    def run(self) -> None:
        try:
            self.loaded = self.load()
            if self.on_loaded is not None:
                self.on_loaded(self.loaded)
        except BaseException as error:
            self.error = error
            self.state = WorkerState.FAILED
            if self.on_load_failed is not None:
                self.on_load_failed(error)
            return
        self.state = WorkerState.READY
        self.metrics.worker_ready.set(1)
        try:
            self.serve_jobs()
        except BaseException as error:
            self.error = error
            self.state = WorkerState.DEAD
            log.exception("worker.died")
        finally:
            self.metrics.worker_ready.set(0)

    def serve_jobs(self) -> None:
        while True:
            job = self.jobs.get()
            self.metrics.queue_depth.set(self.jobs.qsize())
            if job is None:
                self.state = WorkerState.STOPPED
                return
            try:
                self.process(job)
            finally:
                with self.active_lock:
                    self.active.discard(job)

    def process(self, job: Job) -> None:
        assert self.loaded is not None
        job.started_at = time.monotonic()
        self.metrics.queue_wait.observe(job.started_at - job.admitted_at)
        try:
            if (reason := job.should_stop()) is not None:
                raise Stopped(reason)
            usage = run_completion(self.loaded.engine, job.plan, job.emit, job.should_stop)
        except Stopped as stopped:
            ran_ms = round((time.monotonic() - job.started_at) * 1000, 1)
            log.info("worker.stopped", request_id=job.id, reason=stopped.reason, ran_ms=ran_ms)
            self.metrics.stopped.labels(reason=stopped.reason).inc()
            job.emit(Failed(stopped.reason, f"generation {stopped.reason}"))
            return
        except Exception as error:
            log.exception("worker.request_failed", request_id=job.id)
            job.emit(Failed("error", f"{type(error).__name__}: {error}"))
            return
        stats = usage.stats
        self.metrics.record_generation(usage.prompt_tokens, usage.completion_tokens, stats)
        self.metrics.record_prompt_cache(self.loaded.engine.prompt_cache)
        job.emit(Done(usage))
