"""POST /v1/completions: plan on the event loop, generate on the worker, answer or stream."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse

from server.auth import require_api_key
from server.events import Chunk, Done, Finished, Job
from server.openapi import CompletionResponse, generation_responses
from server.plan import build_plan
from server.routes.jobs import (
    draftwise_field,
    job_events,
    request_record,
    serving_facts,
    sse_stream,
    start_job,
    usage_body,
)
from server.schemas import CompletionRequest
from server.state import ServerState

router = APIRouter(dependencies=[Depends(require_api_key)])

RESPONSES = generation_responses("The completion", CompletionResponse)


@router.post("/v1/completions", response_model=None, responses=RESPONSES)
async def create_completion(
    body: CompletionRequest, request: Request
) -> JSONResponse | StreamingResponse:
    state: ServerState = request.app.state.draftwise
    facts = serving_facts(state, body.model)
    plan = build_plan(body, facts, state.live)
    job = start_job(state, plan, "cmpl", request)
    header = {"id": job.id, "object": "text_completion", "created": int(time.time())}
    header["model"] = facts.model_id
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        chunks = stream_chunks(job, header, include_usage, request)
        return StreamingResponse(sse_stream(chunks), media_type="text/event-stream")
    return JSONResponse(await collect(job, header, len(plan.choices), request))


def merge_logprobs(target: dict[str, list[Any]] | None, part: dict[str, list[Any]] | None) -> Any:
    if part is None:
        return target
    if target is None:
        return {key: list(values) for key, values in part.items()}
    for key, values in part.items():
        target[key].extend(values)
    return target


async def collect(
    job: Job, header: dict[str, Any], n_choices: int, request: Request
) -> dict[str, Any]:
    choices: list[dict[str, Any]] = [
        {"index": i, "text": "", "logprobs": None, "finish_reason": None} for i in range(n_choices)
    ]
    record = request_record(request)
    async for event in job_events(job, request, record):
        if isinstance(event, Chunk):
            choice = choices[event.index]
            choice["text"] += event.text
            choice["logprobs"] = merge_logprobs(choice["logprobs"], event.logprobs)
        elif isinstance(event, Finished):
            choices[event.index]["finish_reason"] = event.finish_reason
        elif isinstance(event, Done):
            record["finish_reasons"] = [c["finish_reason"] for c in choices]
            return {**header, "choices": choices, "usage": usage_body(event.usage)}
    raise AssertionError("job_events ends with Done")


async def stream_chunks(
    job: Job, header: dict[str, Any], include_usage: bool, request: Request
) -> AsyncIterator[dict[str, Any]]:
    async for event in job_events(job, request, request_record(request)):
        if isinstance(event, Chunk):
            choice = {"index": event.index, "text": event.text, "logprobs": event.logprobs}
            yield {**header, "choices": [{**choice, "finish_reason": None}], "usage": None}
        elif isinstance(event, Finished):
            choice = {"index": event.index, "text": "", "logprobs": None}
            choice["finish_reason"] = event.finish_reason
            yield {**header, "choices": [choice], "usage": None, **draftwise_field(event.stats)}
        elif isinstance(event, Done) and include_usage:
            yield {**header, "choices": [], "usage": usage_body(event.usage)}
