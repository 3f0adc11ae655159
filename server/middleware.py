"""Pure ASGI middleware (streaming-safe): one structlog line and one metrics sample per
HTTP request; the request body size limit."""

from __future__ import annotations

import time
import uuid
from typing import Any

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.errors import APIError
from server.metrics import Metrics

log = structlog.get_logger("draftwise.http")
ROUTES = {
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/models",
    "/v1/settings",
    "/tokenize",
    "/detokenize",
    "/tokenizer_info",
    "/health",
    "/metrics",
}
# Probes poll these every few seconds: their lines go out at debug level.
PROBES = {"/health", "/metrics"}


class RequestLog:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}

        async def send_with_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            self.record(scope, status["code"], time.perf_counter() - start)

    def record(self, scope: Scope, status: int, seconds: float) -> None:
        path = scope["path"]
        route = path if path in ROUTES else "other"
        self.metrics.requests.labels(route=route, status=str(status)).inc()
        self.metrics.latency.labels(route=route).observe(seconds)
        extra: dict[str, Any] = dict(scope.get("state", {}).get("draftwise", {}))
        extra.setdefault("request_id", f"req-{uuid.uuid4().hex[:12]}")
        extra.update(
            method=scope["method"],
            path=path,
            status=status,
            latency_ms=round(seconds * 1000, 1),
        )
        (log.debug if path in PROBES else log.info)("request", **extra)


class BodyLimit:
    """Reads a request body up to `max_bytes` before the app sees it; beyond, 413.

    Every route reads its whole JSON body anyway, so buffering it here costs
    nothing and catches bodies without a Content-Length (chunked) too.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self.too_large(send, int(declared))
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left before sending it all
                await self.app(scope, replay([], message, receive), send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await self.too_large(send, size)
                return
            if not message.get("more_body", False):
                break
        body = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, replay([body], None, receive), send)

    async def too_large(self, send: Send, size: int) -> None:
        error = APIError(
            413,
            f"The request body ({size}+ bytes) exceeds the limit of {self.max_bytes} bytes "
            "(max_body_bytes)",
            code="request_too_large",
        )
        await error.response()({"type": "http"}, _no_receive, send)


def replay(messages: list[Message], last: Message | None, receive: Receive) -> Receive:
    """A receive that hands out the buffered messages, then defers to the real one."""
    pending = [*messages, *([last] if last is not None else [])]

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}
