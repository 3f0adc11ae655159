"""POST /v1/chat/completions: messages through the chat template, then the completions path.

The rendered prompt becomes an ordinary `CompletionPlan` on the same worker. One
consumer (`ChoiceState.deltas`) turns the job's text into chat deltas; the JSON renderer
accumulates them into messages and the SSE renderer sends them as they come, so a
streamed answer reassembles into the non-streamed one.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse

from server.auth import require_api_key
from server.chat import ChoiceState, ToolCallParser, chat_logprobs, render
from server.errors import APIError, invalid
from server.events import Chunk, CompletionPlan, Done, Finished, Job
from server.openapi import generation_responses
from server.plan import ModelFacts, build_plan
from server.routes.jobs import (
    draftwise_field,
    job_events,
    request_record,
    serving_facts,
    sse_stream,
    start_job,
    usage_body,
)
from server.schemas import ChatCompletionRequest, CompletionRequest
from server.settings import LiveSettings
from server.state import ServerState

router = APIRouter(dependencies=[Depends(require_api_key)])

RESPONSES = generation_responses("The chat completion")
# A plan error about the prompt is about the messages it was rendered from.
PARAM_NAMES = {"prompt": "messages", "logprobs": "top_logprobs"}


def chat_plan(
    body: ChatCompletionRequest, facts: ModelFacts, live: LiveSettings
) -> tuple[CompletionPlan, bool]:
    if body.top_logprobs is not None and not body.logprobs:
        raise invalid("top_logprobs requires logprobs to be true", "top_logprobs")
    if body.stream_options is not None and not body.stream:
        raise invalid("stream_options is only allowed when stream is true", "stream_options")
    rendered = render(body, facts.tokenizer)
    forced, response_format = rendered.grammar is not None, body.response_format
    if forced and response_format is not None and response_format.type != "text":
        message = "a forced tool call (tool_choice) cannot also follow response_format"
        raise invalid(message, "response_format")
    max_tokens = body.max_completion_tokens
    request = CompletionRequest(
        model=body.model,
        prompt=rendered.prompt,
        max_tokens=body.max_tokens if max_tokens is None else max_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        n=body.n,
        stop=body.stop,
        seed=body.seed,
        logprobs=(body.top_logprobs or 0) if body.logprobs else None,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        logit_bias=body.logit_bias,
        ignore_eos=body.ignore_eos,
        response_format=body.response_format,
    )
    try:
        plan = build_plan(request, facts, live, rendered.grammar, "tool_choice")
        return plan, rendered.parse_tools
    except APIError as error:
        error.param = PARAM_NAMES.get(error.param or "", error.param)
        raise


@router.post("/v1/chat/completions", response_model=None, responses=RESPONSES)
async def create_chat_completion(
    body: ChatCompletionRequest, request: Request
) -> JSONResponse | StreamingResponse:
    state: ServerState = request.app.state.draftwise
    facts = serving_facts(state, body.model)
    plan, parse_tools = chat_plan(body, facts, state.live)
    job = start_job(state, plan, "chatcmpl", request)
    header = {"id": job.id, "created": int(time.time()), "model": facts.model_id}
    choices = [
        ChoiceState(
            ToolCallParser() if parse_tools else None, logprobs=[] if body.logprobs else None
        )
        for _ in plan.choices
    ]
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        chunks = stream_chunks(job, header, choices, include_usage, request)
        return StreamingResponse(sse_stream(chunks), media_type="text/event-stream")
    return JSONResponse(await collect(job, header, choices, request))


async def collect(
    job: Job, header: dict[str, Any], choices: list[ChoiceState], request: Request
) -> dict[str, Any]:
    reasons: list[str | None] = [None] * len(choices)
    async for event in job_events(job, request, request_record(request)):
        if isinstance(event, Chunk):
            add_chunk(choices[event.index], event)
        elif isinstance(event, Finished):
            state = choices[event.index]
            state.deltas("", final=True)
            reasons[event.index] = state.finish_reason(event.finish_reason)
        elif isinstance(event, Done):
            body = [
                {
                    "index": i,
                    "message": state.message(),
                    "logprobs": None if state.logprobs is None else {"content": state.logprobs},
                    "finish_reason": reasons[i],
                }
                for i, state in enumerate(choices)
            ]
            request_record(request)["finish_reasons"] = reasons
            usage = usage_body(event.usage)
            return {**header, "object": "chat.completion", "choices": body, "usage": usage}
    raise AssertionError("job_events ends with Done")


def add_chunk(state: ChoiceState, event: Chunk) -> list[dict[str, Any]]:
    """The chunk's deltas; its logprobs are added to the choice's (EOS's are not shown
    in chat, whose tokens are the message's)."""
    if state.logprobs is not None and event.logprobs is not None and not event.eos:
        state.logprobs.extend(chat_logprobs(event.logprobs))
    return state.deltas(event.text)


async def stream_chunks(
    job: Job,
    header: dict[str, Any],
    choices: list[ChoiceState],
    include_usage: bool,
    request: Request,
) -> AsyncIterator[dict[str, Any]]:
    def chunk(
        index: int, delta: dict[str, Any], top: dict[str, Any] | None = None, **extra: Any
    ) -> dict[str, Any]:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}
        payload = {**header, "object": "chat.completion.chunk", "choices": [{**choice, **extra}]}
        payload |= top or {}
        return {**payload, "usage": None} if include_usage else payload

    async for event in job_events(job, request, request_record(request)):
        if isinstance(event, Chunk | Finished):
            state = choices[event.index]
            if not state.started:
                state.started = True
                yield chunk(event.index, {"role": "assistant", "content": ""})
        if isinstance(event, Chunk):
            seen = len(state.logprobs or [])
            deltas = add_chunk(state, event)
            new = None if state.logprobs is None else {"content": state.logprobs[seen:]}
            for n, delta in enumerate(deltas):
                yield chunk(event.index, delta, logprobs=new if n == 0 else None)
            if not deltas and new and new["content"]:
                yield chunk(event.index, {}, logprobs=new)
        elif isinstance(event, Finished):
            for delta in state.deltas("", final=True):
                yield chunk(event.index, delta)
            reason = state.finish_reason(event.finish_reason)
            yield chunk(event.index, {}, draftwise_field(event.stats), finish_reason=reason)
        elif isinstance(event, Done) and include_usage:
            yield {
                **header,
                "object": "chat.completion.chunk",
                "choices": [],
                "usage": usage_body(event.usage),
            }
