"""The model worker: one thread that owns every piece of MLX state.

It loads the model, then runs the scheduler (server/scheduler.py), which takes
jobs from a bounded queue into one batch of up to `max_batch_size` choices.
HTTP handlers only submit jobs and read their events; results travel back to
the event loop with `loop.call_soon_threadsafe` (server/events.py). Between
steps the scheduler checks each job's cancel flag (client gone) and deadline.
"""

from __future__ import annotations

import enum
import queue
import threading
from collections.abc import Callable

import structlog

from drafter.loading import Loaded
from server.events import Job
from server.metrics import Metrics
from server.scheduler import Scheduler

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


class ModelWorker:
    def __init__(
        self,
        load: Callable[[], Loaded],
        max_queue_depth: int,
        metrics: Metrics,
        max_batch_size: int = 1,
        on_load_failed: Callable[[BaseException], None] | None = None,
        on_loaded: Callable[[Loaded], None] | None = None,
    ) -> None:
        self.load = load
        self.max_batch_size = max_batch_size
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
        assert self.loaded is not None
        scheduler = Scheduler(
            self.loaded.engine, self.jobs, self.max_batch_size, self.metrics, self.job_ended
        )
        scheduler.run()
        self.state = WorkerState.STOPPED

    def job_ended(self, job: Job) -> None:
        with self.active_lock:
            self.active.discard(job)
