"""POST /v1/responses: the Responses API, stateless, on the chat path.

The request becomes a chat request (`chat_request`: instructions as a system turn, input
items as messages, function calls and their outputs as tool turns), so it runs the same
chat template and worker path as /v1/chat/completions and gives the same text. What it
does not serve (stored responses, built-in tools, non-text parts, structured text
formats) is a 400 naming the field. The answer is rendered as a `response` object, or as
the SDK's event sequence when streamed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse

from server.auth import require_api_key
from server.chat import ChoiceState, ToolCallParser
from server.errors import APIError, invalid
from server.events import Chunk, Done, Finished, Job, Usage
from server.openapi import generation_responses
from server.routes.chat import add_chunk, chat_plan
from server.routes.jobs import (
    draftwise_field,
    job_events,
    request_record,
    serving_facts,
    sse,
    start_job,
)
from server.schemas import (
    ChatCompletionRequest,
    ChatMessage,
    FunctionCall,
    InputItem,
    JsonSchemaFormat,
    NamedFunction,
    NamedToolChoice,
    ResponseFormat,
    ResponsesRequest,
    Tool,
    ToolCall,
)
from server.state import ServerState

router = APIRouter(dependencies=[Depends(require_api_key)])

RESPONSES = generation_responses("The response")
ROLES = ("user", "system", "developer", "assistant")
TEXT_PARTS = ("input_text", "output_text", "text")
# A chat plan's error about one of its fields is about this Responses field.
PARAM_NAMES = {
    "messages": "input",
    "max_tokens": "max_output_tokens",
    "max_completion_tokens": "max_output_tokens",
    "response_format": "text.format",
    "response_format.type": "text.format.type",
    "response_format.json_schema": "text.format.schema",
}


def unsupported(message: str, param: str) -> APIError:
    return invalid(message, param, "unsupported_parameter")


def check_stateless(body: ResponsesRequest) -> None:
    """Refuse, by name, what a stateless server cannot do."""
    if body.previous_response_id is not None:
        raise unsupported("responses are not stored: send the whole input", "previous_response_id")
    if body.store:
        raise unsupported("responses are not stored: send store false or leave it out", "store")
    if body.background:
        raise unsupported("background responses are not served", "background")
    if body.conversation is not None:
        raise unsupported("conversations are not stored: send the whole input", "conversation")
    if body.prompt is not None:
        raise unsupported("stored prompt templates are not served", "prompt")
    text_format = body.text.format if body.text is not None else None
    if text_format is not None and text_format.type not in ("text", "json_object", "json_schema"):
        raise unsupported(f"text format {text_format.type!r} is not served", "text.format")


def response_format(body: ResponsesRequest) -> ResponseFormat | None:
    """`text.format` as chat's response_format (its schema sits beside its type here)."""
    text_format = body.text.format if body.text is not None else None
    if text_format is None or text_format.type == "text":
        return None
    spec = text_format.model_extra or {}
    if text_format.type == "json_schema" and not isinstance(spec.get("schema"), dict):
        raise invalid("a json_schema text format needs a schema object", "text.format.schema")
    schema = JsonSchemaFormat.model_validate(
        {"name": spec.get("name"), "schema": spec.get("schema")}
    )
    return ResponseFormat(type=text_format.type, json_schema=schema)


def chat_tools(body: ResponsesRequest) -> list[Tool] | None:
    if body.tools is None:
        return None
    tools = []
    for i, tool in enumerate(body.tools):
        if tool.type != "function":
            raise unsupported(f"tool type {tool.type!r} is not served", f"tools[{i}].type")
        if not tool.name:
            raise invalid("a function tool needs a name", f"tools[{i}].name")
        spec = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
        tools.append(Tool.model_validate({"type": "function", "function": spec}))
    return tools


def chat_tool_choice(
    body: ResponsesRequest,
) -> Literal["auto", "none", "required"] | NamedToolChoice | None:
    choice = body.tool_choice
    if choice is None:
        return None
    for mode in ("auto", "none", "required"):
        if choice == mode:
            return mode
    if isinstance(choice, str) or choice.type != "function" or not choice.name:
        raise unsupported("tool_choice is auto, none, required or a function", "tool_choice")
    return NamedToolChoice(type="function", function=NamedFunction(name=choice.name))


def item_message(item: InputItem, i: int) -> ChatMessage:
    """One input item as the chat message it is."""
    if item.type == "function_call":
        if not item.call_id or not item.name:
            raise invalid("a function_call item needs call_id and name", f"input[{i}]")
        call = FunctionCall(name=item.name, arguments=item.arguments or "{}")
        return ChatMessage(role="assistant", tool_calls=[ToolCall(id=item.call_id, function=call)])
    if item.type == "function_call_output":
        if not item.call_id:
            raise invalid("a function_call_output item needs call_id", f"input[{i}].call_id")
        return ChatMessage(role="tool", tool_call_id=item.call_id, content=item.output or "")
    if item.type != "message":
        raise unsupported(f"input item type {item.type!r} is not served", f"input[{i}].type")
    if item.role not in ROLES:
        raise invalid(f"role must be one of {', '.join(ROLES)}", f"input[{i}].role")
    return ChatMessage(role=item.role, content=item_text(item, i))  # type: ignore[arg-type]


def item_text(item: InputItem, i: int) -> str:
    if item.content is None or isinstance(item.content, str):
        return item.content or ""
    for j, part in enumerate(item.content):
        if part.type not in TEXT_PARTS:
            param = f"input[{i}].content[{j}].type"
            raise unsupported(f"content part {part.type!r} is not served (text only)", param)
    return "".join(part.text or "" for part in item.content)


def chat_request(body: ResponsesRequest) -> ChatCompletionRequest:
    """The chat request this response is served as."""
    check_stateless(body)
    messages = (
        [] if body.instructions is None else [ChatMessage(role="system", content=body.instructions)]
    )
    if isinstance(body.input, str):
        messages.append(ChatMessage(role="user", content=body.input))
    else:
        messages += [item_message(item, i) for i, item in enumerate(body.input)]
    if not messages:
        raise invalid("input is empty", "input")
    return ChatCompletionRequest(
        model=body.model,
        messages=messages,
        max_completion_tokens=body.max_output_tokens,
        temperature=body.temperature,
        top_p=body.top_p,
        stop=body.stop,
        seed=body.seed,
        logit_bias=body.logit_bias,
        tools=chat_tools(body),
        tool_choice=chat_tool_choice(body),
        ignore_eos=body.ignore_eos,
        response_format=response_format(body),
    )


@router.post("/v1/responses", response_model=None, responses=RESPONSES)
async def create_response(
    body: ResponsesRequest, request: Request
) -> JSONResponse | StreamingResponse:
    state: ServerState = request.app.state.draftwise
    facts = serving_facts(state, body.model)
    try:
        plan, parse_tools = chat_plan(chat_request(body), facts, state.live)
    except APIError as error:
        error.param = PARAM_NAMES.get(error.param or "", error.param)
        raise
    job = start_job(state, plan, "resp", request)
    answer = Answer(
        body, facts.model_id, job.id, ChoiceState(ToolCallParser() if parse_tools else None)
    )
    if body.stream:
        return StreamingResponse(
            stream_events(job, answer, request), media_type="text/event-stream"
        )
    async for event in job_events(job, request, request_record(request)):
        answer.take(event)
    return JSONResponse(answer.response())


@dataclass
class Answer:
    """The response being built from the job's events, for both renderers."""

    body: ResponsesRequest
    model: str
    id: str
    state: ChoiceState
    created_at: int = field(default_factory=lambda: int(time.time()))
    message_id: str = field(default_factory=lambda: f"msg_{uuid.uuid4().hex}")
    finish_reason: str | None = None
    usage: Usage | None = None

    def take(self, event: Chunk | Finished | Done) -> list[dict[str, Any]]:
        """Fold one event into the answer; returns the chat deltas it released."""
        if isinstance(event, Chunk):
            return add_chunk(self.state, event)
        if isinstance(event, Finished):
            deltas = self.state.deltas("", final=True)
            self.finish_reason = event.finish_reason
            return deltas
        self.usage = event.usage
        return []

    @property
    def status(self) -> str:
        if self.finish_reason is None:
            return "in_progress"
        return "incomplete" if self.finish_reason == "length" else "completed"

    def message_item(self, status: str) -> dict[str, Any]:
        text = self.state.content
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        return {
            "type": "message",
            "id": self.message_id,
            "status": status,
            "role": "assistant",
            "content": [part] if status != "in_progress" or text else [],
        }

    def output(self) -> list[dict[str, Any]]:
        calls = [function_call_item(call) for call in self.state.tool_calls]
        if self.state.content or not calls:
            return [self.message_item(self.status), *calls]
        return calls

    def response(self) -> dict[str, Any]:
        body = self.body
        status = self.status
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete"
            else None,
            "instructions": body.instructions,
            "max_output_tokens": body.max_output_tokens,
            "model": self.model,
            "output": self.output() if self.finish_reason is not None else [],
            "parallel_tool_calls": True
            if body.parallel_tool_calls is None
            else body.parallel_tool_calls,
            "previous_response_id": None,
            "store": False,
            "temperature": body.temperature,
            "top_p": body.top_p,
            "text": {"format": {"type": "text"}},
            "tool_choice": tool_choice_echo(body),
            "tools": [tool.model_dump(exclude_none=True) for tool in body.tools or []],
            "truncation": "disabled",
            "metadata": body.metadata or {},
            "usage": None if self.usage is None else usage_body(self.usage),
        }


def function_call_item(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call['id'].removeprefix('call_')}",
        "call_id": call["id"],
        "name": call["function"]["name"],
        "arguments": call["function"]["arguments"],
        "status": "completed",
    }


def tool_choice_echo(body: ResponsesRequest) -> Any:
    choice = body.tool_choice
    if choice is None or isinstance(choice, str):
        return choice or "auto"
    return choice.model_dump(exclude_none=True)


def usage_body(usage: Usage) -> dict[str, Any]:
    body: dict[str, Any] = {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.stats.cached_tokens,
            "cache_write_tokens": 0,
        },
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }
    return body | draftwise_field(usage.stats)


class Events:
    """Numbered server-sent events in the Responses shape."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, kind: str, **fields: Any) -> str:
        payload = {"type": kind, "sequence_number": self.count, **fields}
        self.count += 1
        return f"event: {kind}\n{sse(payload)}"


async def stream_events(job: Job, answer: Answer, request: Request) -> AsyncIterator[str]:
    """response.created, the output items as they come (a message's text deltas, each
    function call whole), then response.completed or response.incomplete; a failure
    mid-stream is an `error` event."""
    emit = Events()
    yield emit("response.created", response=answer.response())
    yield emit("response.in_progress", response=answer.response())
    opened = False  # the message item, at output index 0 once opened
    items = 0
    try:
        async for event in job_events(job, request, request_record(request)):
            for delta in answer.take(event):
                if "content" in delta:
                    if not opened:
                        opened, items = True, items + 1
                        for line in open_message(emit, answer):
                            yield line
                    yield emit(
                        "response.output_text.delta",
                        item_id=answer.message_id,
                        output_index=0,
                        content_index=0,
                        delta=delta["content"],
                        logprobs=[],
                    )
                for call in delta.get("tool_calls", []):
                    for line in whole_call(emit, function_call_item(call), items):
                        yield line
                    items += 1
    except APIError as error:
        yield emit("error", code=error.code, message=error.message, param=error.param)
        return
    if not opened and not answer.state.tool_calls:
        for line in open_message(emit, answer):
            yield line
        opened = True
    if opened:
        for line in close_message(emit, answer):
            yield line
    yield emit(f"response.{answer.status}", response=answer.response())


def open_message(emit: Events, answer: Answer) -> Iterator[str]:
    item = answer.message_item("in_progress")
    yield emit("response.output_item.added", output_index=0, item=item)
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    yield emit(
        "response.content_part.added",
        item_id=answer.message_id,
        output_index=0,
        content_index=0,
        part=part,
    )


def close_message(emit: Events, answer: Answer) -> Iterator[str]:
    item = answer.message_item("completed" if answer.status == "completed" else "incomplete")
    text = answer.state.content
    ids = {"item_id": answer.message_id, "output_index": 0, "content_index": 0}
    yield emit("response.output_text.done", **ids, text=text, logprobs=[])
    yield emit("response.content_part.done", **ids, part=item["content"][0])
    yield emit("response.output_item.done", output_index=0, item=item)


def whole_call(emit: Events, item: dict[str, Any], index: int) -> Iterator[str]:
    added = {**item, "arguments": "", "status": "in_progress"}
    yield emit("response.output_item.added", output_index=index, item=added)
    ids = {"item_id": item["id"], "output_index": index}
    yield emit("response.function_call_arguments.delta", **ids, delta=item["arguments"])
    yield emit("response.function_call_arguments.done", **ids, arguments=item["arguments"])
    yield emit("response.output_item.done", output_index=index, item=item)
