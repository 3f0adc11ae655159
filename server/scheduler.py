"""The model worker's loop: every admitted request decodes in one batch.

    repeat:
      admit    jobs off the queue while fewer than max_batch_size choices are taken
               (block on the queue only when nothing is running)
      stop     drop the choices of jobs cancelled, timed out or shut down
      start    a waiting choice becomes a sequence when a slot is free (echo first)
      prefill  one chunk for each sequence still reading its prompt
      step     one batched round over every decoding sequence (drafter/batch.py), at
               the width the goodput control picks (drafter/goodput.py)
      deliver  each sequence's tokens to its ChoiceRun (server/generation.py);
               finished choices leave, and a job whose choices all finished is Done

Requests join and leave between steps; none waits for the batch to drain. A
failure inside the shared step fails the requests in it (their caches are then
suspect); one inside a request's own work (echo, prefill, text) fails only it.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from drafter.batch import BatchDecoder, Sequence
from drafter.engine import Engine
from drafter.goodput import WidthControl, size_class
from server.events import ChoicePlan, Done, Failed, Job, Usage
from server.generation import ChoiceRun, Echoes, TokenNames
from server.metrics import Metrics

log = structlog.get_logger("draftwise.worker")


@dataclass(eq=False)
class Running:
    """One choice in flight."""

    run: ChoiceRun
    sequence: Sequence


@dataclass(eq=False)
class JobState:
    job: Job
    usage: Usage
    echoes: Echoes  # its `names` are the job's token names too
    waiting: list[ChoicePlan]  # choices not started yet
    running: list[Running] = field(default_factory=list)

    @property
    def taken(self) -> int:
        """Batch slots this job holds or will hold."""
        return len(self.waiting) + len(self.running)


class Scheduler:
    def __init__(
        self,
        engine: Engine,
        jobs: queue.Queue[Job | None],
        max_batch_size: int,
        metrics: Metrics,
        on_job_end: Callable[[Job], None],
    ) -> None:
        self.engine = engine
        self.jobs = jobs
        self.max_batch_size = max_batch_size
        self.metrics = metrics
        self.on_job_end = on_job_end
        self.decoder = BatchDecoder(engine)
        self.control = WidthControl(self.decoder.width)
        self.states: list[JobState] = []
        self.stopping = False  # the sentinel arrived: finish what runs, admit nothing
        self.widths: dict[int, int] = {}  # size class -> its last goodput decision, for the log

    def run(self) -> None:
        while not (self.stopping and not self.states):
            self.admit()
            self.stop_abandoned()
            self.start_choices()
            self.advance_prefills()
            self.step()

    # -- admission -----------------------------------------------------------------------

    def slots_taken(self) -> int:
        return sum(state.taken for state in self.states)

    def admit(self) -> None:
        while not self.stopping and self.slots_taken() < self.max_batch_size:
            try:
                job = self.jobs.get(block=not self.states)
            except queue.Empty:
                return
            self.metrics.queue_depth.set(self.jobs.qsize())
            if job is None:
                self.stopping = True
                return
            job.started_at = time.monotonic()
            self.metrics.queue_wait.observe(job.started_at - job.admitted_at)
            plan = job.plan
            usage = Usage(prompt_tokens=sum(len(prompt) for prompt in plan.prompts))
            echoes = Echoes(self.engine, plan, TokenNames(self.engine.tokenizer))
            self.states.append(JobState(job, usage, echoes, list(plan.choices)))

    def stop_abandoned(self) -> None:
        for state in list(self.states):
            if (reason := state.job.should_stop()) is not None:
                self.end_stopped(state, reason)

    def start_choices(self) -> None:
        free = self.max_batch_size - sum(len(state.running) for state in self.states)
        for state in list(self.states):
            while free > 0 and state.waiting:
                choice = state.waiting.pop(0)
                try:
                    self.start(state, choice)
                except Exception as error:
                    self.end_failed(state, error)
                    break
                free -= 1

    def start(self, state: JobState, choice: ChoicePlan) -> None:
        job, plan = state.job, state.job.plan
        offset = state.echoes.emit(choice, job.emit)
        run = ChoiceRun(self.engine, plan, choice, state.echoes.names, job.emit, offset)
        if plan.max_tokens <= 0:
            self.end_choice(state, run)
            return
        sequence = self.decoder.start(
            run.prompt, plan.max_tokens, choice.params, run.stats, plan.ignore_eos
        )
        state.running.append(Running(run, sequence))

    # -- decoding ------------------------------------------------------------------------

    def advance_prefills(self) -> None:
        for state in list(self.states):
            for running in list(state.running):
                if running.sequence.prefill is None:
                    continue
                try:
                    began = time.perf_counter()
                    first = self.decoder.advance_prefill(running.sequence)
                    running.run.stats.prefill_s += time.perf_counter() - began
                    if first:
                        self.deliver(state, running)
                except Exception as error:
                    self.end_failed(state, error)
                    break

    def step(self) -> None:
        members = [
            (state, running)
            for state in self.states
            for running in state.running
            if running.sequence.decoding
        ]
        if not members:
            return
        sequences = [running.sequence for _, running in members]
        seeded = any(
            s.session.params.seed is not None and not s.session.params.greedy for s in sequences
        )
        choice = self.control.choose(sequences, seeded)
        self.record_decision(choice.width, choice.reason, len(sequences), choice.expected)
        pipelined = self.decoder.pipelined(sequences)
        began = time.perf_counter()
        try:
            ran = self.decoder.step(sequences, choice.width)
        except Exception as error:
            for state in {id(state): state for state, _ in members}.values():
                self.end_failed(state, error)
            return
        seconds = time.perf_counter() - began
        size = str(size_class(len(sequences)))
        labels = {"batch": size, "width": str(ran), "pipelined": str(pipelined).lower()}
        self.metrics.batch_step_seconds.labels(**labels).observe(seconds)
        self.control.observe_step(ran, len(sequences), seconds, choice)
        for _, running in members:
            running.run.stats.decode_s += seconds
        emitted = 0
        for sequence in sequences:
            self.control.observe_round(ran, sequence.accepted, sequence)
            emitted += len(sequence.tokens)
        self.metrics.batch_step_tokens.observe(emitted)
        for state, running in members:  # a request new to a step may have emitted nothing
            if state in self.states:
                self.deliver(state, running)

    def record_decision(
        self, width: int, reason: str, batch: int, expected: dict[int, float]
    ) -> None:
        size = size_class(batch)
        self.metrics.batch_size.observe(batch)
        self.metrics.batch_width.labels(batch=str(size), width=str(width), reason=reason).inc()
        if reason == "goodput" and width != self.widths.get(size):
            estimates = {str(w): round(v, 1) for w, v in expected.items()}
            costs = {str(w): round(c * 1e3, 3) for w, c in self.control.costs(size).items()}
            log.debug(
                "batch.width",
                width=width,
                batch=batch,
                tokens_per_s=estimates,
                ms_per_request=costs,
            )
            self.widths[size] = width

    def deliver(self, state: JobState, running: Running) -> None:
        """Hand the sequence's new tokens to its text; end the choice if it is over."""
        try:
            stopped = running.run.push(running.sequence.tokens)
        except Exception as error:
            self.end_failed(state, error)
            return
        if stopped or running.sequence.done:
            state.running.remove(running)
            self.control.forget(running.sequence)
            self.end_choice(state, running.run)

    # -- endings -------------------------------------------------------------------------

    def end_choice(self, state: JobState, run: ChoiceRun) -> None:
        finished = run.finish()
        state.usage.completion_tokens += finished.completion_tokens
        state.usage.add_stats(run.stats)
        state.job.emit(finished)
        if not state.waiting and not state.running:
            usage = state.usage
            self.metrics.record_generation(
                usage.prompt_tokens, usage.completion_tokens, usage.stats
            )
            self.metrics.record_prompt_cache(self.engine.prompt_cache)
            self.end(state, Done(usage))

    def end_stopped(self, state: JobState, reason: str) -> None:
        """Cancelled (client gone), timed out, or cut at shutdown."""
        job = state.job
        started = job.started_at if job.started_at is not None else job.admitted_at
        ran_ms = round((time.monotonic() - started) * 1000, 1)
        log.info("worker.stopped", request_id=job.id, reason=reason, ran_ms=ran_ms)
        self.metrics.stopped.labels(reason=reason).inc()
        self.end(state, Failed(reason, f"generation {reason}"))

    def end_failed(self, state: JobState, error: Exception) -> None:
        log.exception("worker.request_failed", request_id=state.job.id, exc_info=error)
        self.end(state, Failed("error", f"{type(error).__name__}: {error}"))

    def end(self, state: JobState, event: Done | Failed) -> None:
        for running in state.running:
            self.control.forget(running.sequence)
        if state in self.states:
            self.states.remove(state)
            state.job.emit(event)
            self.on_job_end(state.job)
