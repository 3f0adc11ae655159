"""GET /health (200 serving; 503 loading, draining or worker dead) and GET /metrics."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from server.state import ServerState

router = APIRouter()


@router.get("/health")
async def health(request: Request) -> JSONResponse:
    state: ServerState = request.app.state.draftwise
    worker = state.worker
    if state.drain_deadline is not None:
        left = max(state.drain_deadline - time.monotonic(), 0.0)
        body = {"status": "draining", "in_flight": worker.in_flight, "grace_left_s": round(left, 1)}
        return JSONResponse(body, status_code=503)
    if not worker.ready or state.loaded is None:
        body = {"status": worker.state.value}
        if worker.error is not None:
            body["error"] = f"{type(worker.error).__name__}: {worker.error}"
        return JSONResponse(body, status_code=503)
    loaded = state.loaded
    return JSONResponse(
        {
            "status": "ok",
            "model": loaded.engine.model_id,
            "backend": loaded.device.backend,
            "context_length": loaded.engine.context_length,
            "queue_depth": worker.queue_depth,
            "in_flight": worker.in_flight,
            "blas": state.blas,
            "speculative": loaded.speculative_config(),
        }
    )


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    state: ServerState = request.app.state.draftwise
    state.metrics.queue_depth.set(state.worker.queue_depth)
    state.metrics.in_flight.set(state.worker.in_flight)
    return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)
