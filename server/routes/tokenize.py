"""The remote-tokenizer endpoints in vLLM's shape, which lm-eval's `local-completions`
and `local-chat-completions` look for: with them a client needs only `base_url`.

GET /tokenizer_info, POST /tokenize ({"prompt", "add_special_tokens"} -> {"tokens"}),
POST /detokenize ({"tokens"} -> {"prompt"}).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from server.auth import require_api_key
from server.errors import invalid
from server.routes.jobs import check_model
from server.schemas import DetokenizeRequest, TokenizeRequest
from server.state import ServerState

router = APIRouter(dependencies=[Depends(require_api_key)])


@router.get("/tokenizer_info")
async def tokenizer_info(request: Request) -> dict[str, Any]:
    state: ServerState = request.app.state.draftwise
    facts = state.model_facts()
    tokenizer = facts.tokenizer
    info: dict[str, Any] = {
        name: getattr(tokenizer, name, None)
        for name in ("eos_token", "bos_token", "pad_token", "chat_template")
    }
    info.update(model=facts.model_id, vocab_size=facts.vocab_size)
    info["max_model_len"] = facts.context_length
    return info


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, request: Request) -> dict[str, Any]:
    state: ServerState = request.app.state.draftwise
    facts = state.model_facts()
    check_model(body.model, facts)
    tokens = facts.tokenizer.encode(body.prompt, add_special_tokens=body.add_special_tokens)
    return {"tokens": tokens, "count": len(tokens), "max_model_len": facts.context_length}


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request) -> dict[str, Any]:
    state: ServerState = request.app.state.draftwise
    facts = state.model_facts()
    check_model(body.model, facts)
    bad = next((t for t in body.tokens if not 0 <= t < facts.vocab_size), None)
    if bad is not None:
        raise invalid(
            f"token id {bad} is outside the vocabulary (0..{facts.vocab_size - 1})", "tokens"
        )
    return {"prompt": facts.tokenizer.decode(body.tokens)}
