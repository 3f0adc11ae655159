"""One structlog line and one metrics sample per HTTP request (pure ASGI, streaming-safe)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.metrics import Metrics

log = structlog.get_logger("draftwise.http")
ROUTES = {
    "/v1/completions",
    "/v1/models",
    "/v1/settings",
    "/health",
    "/metrics",
}


class RequestLog:
    def __init__(self, app: ASGIApp, metrics: Metrics):
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
        log.info("request", **extra)
