"""GET /v1/settings (every setting, live or not and why) and PATCH (live ones, atomically)."""

from __future__ import annotations

import json
from typing import Any

import structlog
from fastapi import APIRouter, Depends, Request
from pydantic import ValidationError

from server.auth import require_api_key
from server.errors import APIError, invalid
from server.logs import set_level
from server.openapi import SettingsResponse, error_responses
from server.settings import (
    LIVE_FIELDS,
    STARTUP_ONLY_REASON,
    WORKER_OWNED_REASON,
    LiveSettings,
    setting_specs,
)
from server.state import ServerState

log = structlog.get_logger("draftwise.settings")
router = APIRouter(dependencies=[Depends(require_api_key)])

SPECS = setting_specs()
WORKER_OWNED = tuple(name for name, spec in SPECS.items() if spec.scope == "worker")
STARTUP_ONLY = tuple(name for name, spec in SPECS.items() if spec.scope == "startup")
TYPES: dict[str, str] = {name: spec.type for name, spec in SPECS.items()}


SETTINGS_OK: dict[int | str, dict[str, Any]] = {
    200: {"model": SettingsResponse, "description": "Every setting, live or not and why"}
}


def read_only_values(state: ServerState) -> dict[str, Any]:
    settings = state.settings
    loaded = state.loaded
    # As configured (draft_block_size is the policy's, known once loaded); what the
    # loaded worker actually serves replaces some of these below.
    names = STARTUP_ONLY + WORKER_OWNED
    values: dict[str, Any] = {name: getattr(settings, name, None) for name in names}
    values["cache_dir"] = str(settings.cache_dir)
    values["policy_file"] = str(settings.policy_file) if settings.policy_file else None
    values["api_key"] = "<set>" if settings.api_key else None
    if loaded is not None:
        config = loaded.speculative_config()
        values["model"] = str(loaded.target_path)
        values["draft_model"] = config["drafter"]
        values["draft_block_size"] = config["block_size"]
        values["prompt_cache_bytes"] = config["prompt_cache_bytes"]
    return values


def describe_settings(state: ServerState) -> dict[str, Any]:
    values = {**read_only_values(state), **state.live.model_dump()}
    described: dict[str, Any] = {}
    for name, kind in TYPES.items():
        entry: dict[str, Any] = {"value": values[name], "type": kind, "live": name in LIVE_FIELDS}
        if name in WORKER_OWNED:
            entry["reason"] = WORKER_OWNED_REASON
        elif name in STARTUP_ONLY:
            entry["reason"] = STARTUP_ONLY_REASON
        described[name] = entry
    if state.loaded is not None:
        resolution = state.loaded.resolution
        described["draft_block_size"]["source"] = resolution.source
        described["draft_block_size"]["resolution"] = resolution.reason
    return {"object": "settings", "settings": described}


@router.get("/v1/settings", response_model=None, responses={**SETTINGS_OK, **error_responses(401)})
async def get_settings(request: Request) -> dict[str, Any]:
    return describe_settings(request.app.state.draftwise)


PATCH_SCHEMA = {
    "type": "object",
    "description": "Setting names to new values; only live settings can be changed",
    "properties": {name: {"type": kind} for name, kind in TYPES.items()},
}
PATCH_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": PATCH_SCHEMA}},
    }
}


@router.patch(
    "/v1/settings",
    openapi_extra=PATCH_BODY,
    response_model=None,
    responses={**SETTINGS_OK, **error_responses(400, 401, 409, 413)},
)
async def patch_settings(request: Request) -> dict[str, Any]:
    state: ServerState = request.app.state.draftwise
    patch = await json_object(request)
    unknown = [name for name in patch if name not in TYPES]
    if unknown:
        raise invalid(f"Unknown setting(s): {', '.join(unknown)}", unknown[0], "unknown_setting")
    for names, reason in ((WORKER_OWNED, WORKER_OWNED_REASON), (STARTUP_ONLY, STARTUP_ONLY_REASON)):
        named = [name for name in patch if name in names]
        if named:
            raise APIError(
                409, f"{', '.join(named)}: {reason}", param=named[0], code="setting_not_live"
            )
    try:
        updated = LiveSettings.model_validate({**state.live.model_dump(), **patch}, strict=True)
    except ValidationError as error:
        first = error.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else None
        message = f"Invalid value for '{field}': {first['msg']}"
        raise invalid(message, field, "invalid_value") from None
    state.live = updated
    set_level(updated.log_level)
    log.info("settings.changed", **{name: getattr(updated, name) for name in patch})
    return describe_settings(state)


async def json_object(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise invalid(f"The request body is not valid JSON: {error}", None) from None
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object of setting names to values", None)
    return body
