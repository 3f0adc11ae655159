"""Request bodies. Strict types: a string where a number belongs is a 400, not a coercion."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MAX_N = 16
MAX_CHOICES = 128  # prompts x n in one request
MAX_LOGPROBS = 20
MAX_STOPS = 4
SEED_MIN = -(2**63)
SEED_MAX = 2**64 - 1


class StreamOptions(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")

    include_usage: bool = False


class CompletionRequest(BaseModel):
    """POST /v1/completions. Unknown fields are ignored, as many clients send extras."""

    model_config = ConfigDict(strict=True, extra="ignore")

    model: str
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    n: int | None = Field(None, ge=1, le=MAX_N)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=SEED_MIN, le=SEED_MAX)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool | None = False
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1, le=MAX_N)
    ignore_eos: bool | None = False  # vLLM / llama.cpp extension: run to max_tokens
