"""The OpenAPI schema documents what the server really answers: OpenAI's error
envelope for every error status, never FastAPI's default 422."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    error: ErrorBody


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: dict[str, list[Any]] | None
    finish_reason: str | None


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    draftwise: dict[str, int | None] | None = None


class CompletionResponse(BaseModel):
    id: str
    object: str
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: CompletionUsage


class SettingEntry(BaseModel):
    value: Any
    type: str
    live: bool
    reason: str | None = None
    source: str | None = None
    resolution: str | None = None


class SettingsResponse(BaseModel):
    object: str
    settings: dict[str, SettingEntry]


RETRY_AFTER = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "string"}}}
ERRORS: dict[int, str] = {
    400: "Invalid input (bad JSON, a wrong type, an out-of-range value, context exceeded)",
    401: "Missing or wrong API key (only when one is configured)",
    404: "Unknown model",
    409: "The patch names a setting that is not live; nothing was applied",
    413: "The request body is larger than max_body_bytes",
    429: "The request queue is full (max_queue_depth)",
    503: "The model is loading, the worker is down, or the server is shutting down",
    504: "The request ran past request_timeout_s",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    responses: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        entry: dict[str, Any] = {"model": ErrorResponse, "description": ERRORS[status]}
        if status in (429, 503):
            entry["headers"] = RETRY_AFTER
        responses[status] = entry
    return responses


# One server-sent event, as OpenAPI 3.2's itemSchema and schemathesis read a
# text/event-stream body: an event at a time, {data, event, id, retry}.
SSE_EVENT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "data": {"type": "string"},
        "event": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
    "required": ["data"],
}


def generation_responses(
    answer: str, model: type[BaseModel] | None = None
) -> dict[int | str, dict[str, Any]]:
    """The responses of a generating route: the answer as JSON (`model`, when given), or
    with stream=true server-sent events, and every error status it can send."""
    ok: dict[str, Any] = {
        "description": f"{answer}; with stream=true, server-sent events instead",
        "content": {"text/event-stream": {"schema": SSE_EVENT}},
    }
    if model is not None:
        ok["model"] = model
    return {200: ok, **error_responses(400, 401, 404, 413, 429, 503, 504)}


def install_openapi(app: FastAPI) -> None:
    """Generate the schema once, without the 422 responses FastAPI adds by default."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    operation.get("responses", {}).pop("422", None)
            components = schema.get("components", {}).get("schemas", {})
            components.pop("HTTPValidationError", None)
            components.pop("ValidationError", None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
