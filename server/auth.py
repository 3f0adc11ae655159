"""API key check for /v1/*: constant-time compare, only when a key is configured."""

from __future__ import annotations

import hmac

from fastapi import Request

from server.errors import APIError


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header:
        scheme, _, token = header.partition(" ")
        return token.strip() if scheme.lower() == "bearer" else None
    return request.headers.get("x-api-key")


async def require_api_key(request: Request) -> None:
    expected = request.app.state.draftwise.settings.api_key
    if not expected:
        return
    given = bearer_token(request)
    if given is None:
        raise APIError(401, "Missing API key (Authorization: Bearer ...)", code="missing_api_key")
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise APIError(401, "Incorrect API key provided", code="invalid_api_key")
