"""The FastAPI app: routers per resource, OpenAI error envelope, request logging."""

from __future__ import annotations

from fastapi import FastAPI

from server.errors import install_error_handlers
from server.middleware import RequestLog
from server.routes import completions, health, models, settings
from server.state import ServerState


def create_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="draftwise", version="0.1.0", docs_url=None, redoc_url=None)
    app.state.draftwise = state
    install_error_handlers(app)
    for module in (completions, models, settings, health):
        app.include_router(module.router)
    app.add_middleware(RequestLog, metrics=state.metrics)
    return app
