"""OpenAI's error envelope for every failure, and the handlers that produce it.

Bad input is always a 400 naming `param` (never FastAPI's 422, never a 500).
"""

from __future__ import annotations

from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = structlog.get_logger("draftwise.server")
SERVED = (
    "POST /v1/completions, POST /v1/chat/completions, GET /v1/models, "
    "GET|PATCH /v1/settings, POST /tokenize, POST /detokenize, GET /tokenizer_info, "
    "GET /health, GET /metrics"
)


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def invalid(message: str, param: str | None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def model_not_found(model: str) -> APIError:
    return APIError(
        404, f"The model '{model}' does not exist", param="model", code="model_not_found"
    )


def unavailable(message: str, code: str) -> APIError:
    return APIError(503, message, type="server_error", code=code)


def validation_error(errors: list[dict[str, Any]]) -> APIError:
    """The first pydantic error as a 400; the param is the top-level body field."""
    error = errors[0]
    loc = [part for part in error.get("loc", ()) if part != "body"]
    if error.get("type") == "json_invalid":
        return invalid(f"The request body is not valid JSON: {error.get('msg')}", None)
    if not loc or not isinstance(loc[0], str):
        return invalid(f"The request body is invalid: {error.get('msg')}", None)
    param = loc[0]
    where = ".".join(str(part) for part in loc)
    if error.get("type") == "missing":
        message = f"Missing required parameter: '{param}'"
        return invalid(message, param, "missing_required_parameter")
    return invalid(f"Invalid value for '{where}': {error.get('msg')}", param, "invalid_value")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(_: Request, error: APIError) -> JSONResponse:
        return error.response()

    @app.exception_handler(RequestValidationError)
    async def request_invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        return validation_error(list(error.errors())).response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        kind = "invalid_request_error" if error.status_code < 500 else "server_error"
        code = "not_found" if error.status_code == 404 else None
        message = str(error.detail)
        if error.status_code == 404:
            message = f"No endpoint {request.url.path}; this server serves {SERVED}"
        return APIError(error.status_code, message, type=kind, code=code).response()

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        log.exception("request.unhandled", path=request.url.path)
        return APIError(500, "Internal server error", type="server_error").response()
