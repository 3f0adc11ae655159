"""GET /v1/models and /v1/models/{model}."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from server.auth import require_api_key
from server.errors import model_not_found
from server.state import ServerState

router = APIRouter(dependencies=[Depends(require_api_key)])


def model_card(state: ServerState, model_id: str) -> dict[str, Any]:
    return {
        "id": model_id,
        "object": "model",
        "created": int(state.started_at),
        "owned_by": "draftwise",
    }


@router.get("/v1/models")
async def list_models(request: Request) -> dict[str, Any]:
    state: ServerState = request.app.state.draftwise
    facts = state.model_facts()
    return {"object": "list", "data": [model_card(state, facts.model_id)]}


@router.get("/v1/models/{model:path}")
async def get_model(model: str, request: Request) -> dict[str, Any]:
    state: ServerState = request.app.state.draftwise
    facts = state.model_facts()
    if model != facts.model_id:
        raise model_not_found(model)
    return model_card(state, facts.model_id)
