"""The FastAPI app: routers per resource, OpenAI error envelope, request logging, body
limit, CORS (only when origins are configured)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from server.errors import install_error_handlers
from server.middleware import BodyLimit, RequestLog
from server.openapi import install_openapi
from server.routes import chat, completions, health, models, responses, settings, tokenize
from server.state import ServerState


def create_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="draftwise", version="0.1.0", docs_url=None, redoc_url=None)
    app.state.draftwise = state
    install_error_handlers(app)
    for module in (completions, chat, responses, models, tokenize, settings, health):
        app.include_router(module.router)
    install_openapi(app)
    app.add_middleware(BodyLimit, max_bytes=state.settings.max_body_bytes)
    origins = state.settings.cors_origins()
    if origins:  # off by default: no CORS headers unless origins are configured
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST", "PATCH", "OPTIONS"],
            allow_headers=["Authorization", "Content-Type", "X-API-Key"],
            expose_headers=["Retry-After"],
            max_age=600,
        )
    app.add_middleware(RequestLog, metrics=state.metrics)  # outermost: logs every answer
    return app
