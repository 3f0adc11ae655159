"""POST /v1/completions: plan on the event loop, generate on the worker, answer or stream."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import structlog
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse

from server.auth import require_api_key
from server.errors import APIError, model_not_found, unavailable
from server.generation import Chunk, Finished, Usage
from server.openapi import CompletionResponse, error_responses
from server.plan import build_plan
from server.schemas import CompletionRequest
from server.state import ServerState
from server.worker import Done, Event, Failed, Job, NotReady, QueueFull

log = structlog.get_logger("draftwise.http")
router = APIRouter(dependencies=[Depends(require_api_key)])

# How long past its deadline a handler waits for the worker to report the timeout itself.
DEADLINE_GRACE_S = 5.0
RETRY_AFTER_S = "1"


RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "model": CompletionResponse,
        "description": "The completion; with stream=true, server-sent events instead",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    },
    **error_responses(400, 401, 404, 413, 429, 503, 504),
}


@router.post("/v1/completions", response_model=None, responses=RESPONSES)
async def create_completion(
    body: CompletionRequest, request: Request
) -> JSONResponse | StreamingResponse:
    state: ServerState = request.app.state.draftwise
    if state.draining:
        state.metrics.rejections.labels(reason="draining").inc()
        raise shutting_down()
    facts = state.model_facts()
    if body.model != facts.model_id:
        raise model_not_found(body.model)
    live = state.live
    plan = build_plan(body, facts, live)
    job = Job(
        id=f"cmpl-{uuid.uuid4().hex}",
        plan=plan,
        loop=asyncio.get_running_loop(),
        deadline=time.monotonic() + live.request_timeout_s,
    )
    submit(state, job)
    record = request.scope.setdefault("state", {}).setdefault("draftwise", {})
    record.update(request_id=job.id, prompt_tokens=sum(len(p) for p in plan.prompts))
    header = {"id": job.id, "object": "text_completion", "created": int(time.time())}
    header["model"] = facts.model_id
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        events = stream_events(job, header, include_usage, request, record)
        return StreamingResponse(events, media_type="text/event-stream")
    return JSONResponse(await collect(job, header, len(plan.choices), request, record))


def shutting_down() -> APIError:
    return APIError(
        503,
        "The server is shutting down; retry on another replica",
        type="server_error",
        code="shutting_down",
        headers={"Retry-After": RETRY_AFTER_S},
    )


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


def note_finish(job: Job, record: dict[str, Any]) -> None:
    if job.started_at is not None:
        record["queue_wait_ms"] = round((job.started_at - job.admitted_at) * 1000, 1)


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


def usage_body(usage: Usage, speculative: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }
    if speculative:
        stats = usage.stats
        body["draftwise"] = {
            "block_size": stats.block_size,
            "rounds": stats.rounds,
            "drafted": stats.drafted,
            "accepted": stats.accepted,
        }
    return body


def merge_logprobs(target: dict[str, list[Any]] | None, part: dict[str, list[Any]] | None) -> Any:
    if part is None:
        return target
    if target is None:
        return {key: list(values) for key, values in part.items()}
    for key, values in part.items():
        target[key].extend(values)
    return target


async def collect(
    job: Job, header: dict[str, Any], n_choices: int, request: Request, record: dict[str, Any]
) -> dict[str, Any]:
    choices = [
        {"index": i, "text": "", "logprobs": None, "finish_reason": None} for i in range(n_choices)
    ]
    watcher = asyncio.create_task(watch_disconnect(request, job, record))
    try:
        while True:
            event = await next_event(job)
            if isinstance(event, Chunk):
                choice = choices[event.index]
                choice["text"] += event.text
                choice["logprobs"] = merge_logprobs(choice["logprobs"], event.logprobs)
            elif isinstance(event, Finished):
                choices[event.index]["finish_reason"] = event.finish_reason
            elif isinstance(event, Failed):
                record["outcome"] = event.reason
                raise failure(event)
            elif isinstance(event, Done):
                record["completion_tokens"] = event.usage.completion_tokens
                record["finish_reasons"] = [c["finish_reason"] for c in choices]
                speculative = event.usage.stats.rounds > 0
                return {**header, "choices": choices, "usage": usage_body(event.usage, speculative)}
    finally:
        watcher.cancel()
        job.cancel()  # no-op when finished; frees the worker when the handler is cancelled
        note_finish(job, record)


def sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


async def stream_events(
    job: Job, header: dict[str, Any], include_usage: bool, request: Request, record: dict[str, Any]
) -> AsyncIterator[str]:
    watcher = asyncio.create_task(watch_disconnect(request, job, record))
    try:
        while True:
            event = await next_event(job)
            if isinstance(event, Chunk):
                choice = {"index": event.index, "text": event.text, "logprobs": event.logprobs}
                yield sse({**header, "choices": [{**choice, "finish_reason": None}], "usage": None})
            elif isinstance(event, Finished):
                choice = {"index": event.index, "text": "", "logprobs": None}
                choice["finish_reason"] = event.finish_reason
                yield sse({**header, "choices": [choice], "usage": None})
            elif isinstance(event, Failed):
                record["outcome"] = event.reason
                yield sse(failure(event).body())
                yield "data: [DONE]\n\n"
                return
            elif isinstance(event, Done):
                record["completion_tokens"] = event.usage.completion_tokens
                if include_usage:
                    usage = usage_body(event.usage, event.usage.stats.rounds > 0)
                    yield sse({**header, "choices": [], "usage": usage})
                yield "data: [DONE]\n\n"
                return
    finally:
        watcher.cancel()
        job.cancel()  # the client went away mid-stream: stop at the next round
        note_finish(job, record)
