"""What every generating route shares: submit a job to the worker, then read its events.

`job_events` is the one consumer of a job's events. It watches for the client going
away, turns a worker failure into an `APIError`, and yields `Chunk`, `Finished` and
finally `Done`. Each route only renders them: as one JSON body or as server-sent events.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import structlog
from fastapi import Request

from drafter.decoding import GenerationStats
from server.errors import APIError, model_not_found, unavailable
from server.events import Chunk, CompletionPlan, Done, Event, Failed, Finished, Job, Usage
from server.plan import ModelFacts
from server.state import ServerState
from server.worker import NotReady, QueueFull

log = structlog.get_logger("draftwise.http")

# How long past its deadline a handler waits for the worker to report the timeout itself.
DEADLINE_GRACE_S = 5.0
RETRY_AFTER_S = "1"
DONE_LINE = "data: [DONE]\n\n"


def shutting_down() -> APIError:
    return APIError(
        503,
        "The server is shutting down; retry on another replica",
        type="server_error",
        code="shutting_down",
        headers={"Retry-After": RETRY_AFTER_S},
    )


def check_accepting(state: ServerState) -> None:
    if state.draining:
        state.metrics.rejections.labels(reason="draining").inc()
        raise shutting_down()


def check_model(model: str | None, facts: ModelFacts) -> None:
    """No `model` means the loaded one (as llama.cpp, mlx_lm.server and vLLM do)."""
    if model is not None and model != facts.model_id:
        raise model_not_found(model)


def serving_facts(state: ServerState, model: str | None) -> ModelFacts:
    """What every generating route checks first: not draining, the model loaded, and
    the request's `model` (if any) the loaded one."""
    check_accepting(state)
    facts = state.model_facts()
    check_model(model, facts)
    return facts


def start_job(state: ServerState, plan: CompletionPlan, prefix: str, request: Request) -> Job:
    job = Job(
        id=f"{prefix}-{uuid.uuid4().hex}",
        plan=plan,
        loop=asyncio.get_running_loop(),
        deadline=time.monotonic() + state.live.request_timeout_s,
    )
    submit(state, job)
    record = request_record(request)
    record.update(request_id=job.id, prompt_tokens=sum(len(p) for p in plan.prompts))
    return job


def submit(state: ServerState, job: Job) -> None:
    try:
        state.worker.submit(job)
    except QueueFull:
        raise APIError(
            429,
            "The server is at capacity (request queue full); retry shortly",
            type="rate_limit_error",
            code="queue_full",
            headers={"Retry-After": RETRY_AFTER_S},
        ) from None
    except NotReady as not_ready:
        raise unavailable(f"The model worker is {not_ready}", "worker_unavailable") from None


def request_record(request: Request) -> dict[str, Any]:
    """The per-request fields the request log line carries (see server.middleware)."""
    return request.scope.setdefault("state", {}).setdefault("draftwise", {})


async def next_event(job: Job) -> Event:
    """The job's next event; a worker stuck past the deadline counts as a timeout."""
    remaining = job.deadline - time.monotonic() + DEADLINE_GRACE_S
    try:
        return await asyncio.wait_for(job.events.get(), timeout=max(remaining, 0.0))
    except TimeoutError:
        job.cancel()
        return Failed("timeout", "generation timeout")


async def watch_disconnect(request: Request, job: Job, record: dict[str, Any]) -> None:
    """Cancel the job when the client goes away (the body was already read)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            job.cancel()
            record["outcome"] = "client_disconnected"
            log.info("request.client_disconnected", request_id=job.id)
            return


def failure(event: Failed) -> APIError:
    if event.reason == "timeout":
        return APIError(
            504,
            "The request timed out (request_timeout_s); partial output was discarded",
            type="timeout_error",
            code="request_timeout",
        )
    if event.reason == "cancelled":
        return APIError(499, "The request was cancelled", type="cancelled", code="cancelled")
    if event.reason == "shutdown":
        return APIError(
            503,
            "The server shut down before the request finished (shutdown_grace_s)",
            type="server_error",
            code="shutting_down",
        )
    return APIError(500, f"Generation failed: {event.message}", type="server_error")


async def job_events(
    job: Job, request: Request, record: dict[str, Any]
) -> AsyncIterator[Chunk | Finished | Done]:
    """The job's events up to and including `Done`; a failure raises its APIError.

    The disconnect watcher stops before `Done` is handed over: a consumer returns on
    `Done` without resuming this generator, and the client leaving after its answer
    is no disconnect."""
    watcher = asyncio.create_task(watch_disconnect(request, job, record))

    def finish() -> None:
        watcher.cancel()
        job.cancel()  # no-op when finished; frees the worker when the client went away
        if job.started_at is not None:
            record["queue_wait_ms"] = round((job.started_at - job.admitted_at) * 1000, 1)

    try:
        while True:
            event = await next_event(job)
            if isinstance(event, Failed):
                record["outcome"] = event.reason
                raise failure(event)
            if isinstance(event, Done):
                record["completion_tokens"] = event.usage.completion_tokens
                record["prefill_ms"] = round(event.usage.stats.prefill_s * 1000, 1)
                record["decode_ms"] = round(event.usage.stats.decode_s * 1000, 1)
                if event.usage.stats.masked_rows:  # structured output
                    record["mask_ms"] = round(event.usage.stats.mask_s * 1000, 1)
                if event.usage.stats.block_size is not None:  # a speculative server
                    record.update(speculative_stats(event.usage.stats))
                finish()
                yield event
                return
            yield event
    finally:
        finish()


def usage_body(usage: Usage) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.stats.cached_tokens},
    }
    return body | draftwise_field(usage.stats)


def speculative_stats(stats: GenerationStats) -> dict[str, Any]:
    """What speculation did for a request or a choice (docs/http-api.md): its rounds,
    the tokens drafted and accepted in them, and the rounds at each width (the goodput
    control may change the width between steps; width-1 steps draft nothing)."""
    return {
        "block_size": stats.block_size,
        "rounds": stats.rounds,
        "drafted": stats.drafted,
        "accepted": stats.accepted,
        "widths": {str(width): rounds for width, rounds in sorted(stats.widths.items())},
    }


def draftwise_field(stats: GenerationStats) -> dict[str, Any]:
    """`{"draftwise": ...}` on a speculative server's usage (or a stream's finishing
    chunk, with that choice's stats); nothing on a classic one."""
    return {} if stats.block_size is None else {"draftwise": speculative_stats(stats)}


def sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


async def sse_stream(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[str]:
    """Payloads as server-sent events, then [DONE]; a failure mid-stream is sent as an
    error event (the status line has already gone out)."""
    try:
        async for payload in events:
            yield sse(payload)
    except APIError as error:
        yield sse(error.body())
    yield DONE_LINE
