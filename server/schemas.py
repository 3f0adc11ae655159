"""Request bodies. Strict types: a string where a number belongs is a 400, not a coercion."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_N = 16
MAX_CHOICES = 128  # prompts x n in one request
MAX_LOGPROBS = 20
MAX_STOPS = 4
SEED_MIN = -(2**63)
SEED_MAX = 2**64 - 1


class Body(BaseModel):
    """Every request body and its parts: strict types, unknown fields ignored."""

    model_config = ConfigDict(strict=True, extra="ignore")


class StreamOptions(Body):
    include_usage: bool = False


class JsonSchemaFormat(Body):
    model_config = ConfigDict(extra="allow")  # strict, from Body

    name: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(Body):
    """`text`, `json_object` or `json_schema` (with `json_schema.schema`)."""

    type: str
    json_schema: JsonSchemaFormat | None = None


class GenerationFields(Body):
    """What both generating endpoints take. Unknown fields are ignored, as many clients
    send extras."""

    model: str | None = None  # None: the loaded model
    max_tokens: int | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    n: int | None = Field(None, ge=1, le=MAX_N)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=SEED_MIN, le=SEED_MAX)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    ignore_eos: bool | None = False  # vLLM / llama.cpp extension: run to max_tokens
    response_format: ResponseFormat | None = None


class CompletionRequest(GenerationFields):
    """POST /v1/completions."""

    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool | None = False
    suffix: str | None = None
    best_of: int | None = Field(None, ge=1, le=MAX_N)


class TextPart(Body):
    """A content part; only text is served (the model reads no images or audio)."""

    type: str
    text: str | None = None


class FunctionCall(Body):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCall(Body):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class FunctionSpec(Body):
    model_config = ConfigDict(extra="allow")  # strict, from Body

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(Body):
    type: Literal["function"]
    function: FunctionSpec


class NamedFunction(Body):
    name: str


class NamedToolChoice(Body):
    type: Literal["function"]
    function: NamedFunction


class ChatCompletionRequest(GenerationFields):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=0)
    logprobs: bool | None = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    tools: list[Tool] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class TokenizeRequest(Body):
    """POST /tokenize, in vLLM's shape (what lm-eval's remote tokenizer sends)."""

    model: str | None = None
    prompt: str
    add_special_tokens: bool = True


class DetokenizeRequest(Body):
    model: str | None = None
    tokens: list[int]


class InputText(Body):
    """A text part of a Responses input message (`input_text`, or `output_text` in an
    assistant turn sent back)."""

    type: str
    text: str | None = None


class InputItem(Body):
    """One item of a Responses `input` list: a message (`type` "message" or absent), a
    function call the model made, or its output."""

    model_config = ConfigDict(extra="allow")  # strict, from Body

    type: str = "message"
    role: str | None = None
    content: str | list[InputText] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | None = None


class ResponseTool(Body):
    model_config = ConfigDict(extra="allow")  # strict, from Body

    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None


class ResponseToolChoice(Body):
    type: str
    name: str | None = None


class TextFormat(Body):
    model_config = ConfigDict(extra="allow")  # strict, from Body

    type: str


class TextConfig(Body):
    model_config = ConfigDict(extra="allow")  # strict, from Body

    format: TextFormat | None = None


class ResponsesRequest(Body):
    """POST /v1/responses: stateless; what it does not serve is refused by name."""

    model: str | None = None
    input: str | list[InputItem]
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stream: bool | None = False
    stop: str | list[str] | None = None  # extension, as on chat (extra_body)
    seed: int | None = Field(None, ge=SEED_MIN, le=SEED_MAX)  # extension
    logit_bias: dict[str, float] | None = None  # extension, as on chat
    tools: list[ResponseTool] | None = None
    tool_choice: str | ResponseToolChoice | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    background: bool | None = None
    conversation: Any = None
    prompt: Any = None
    user: str | None = None
    metadata: dict[str, str] | None = None
    ignore_eos: bool | None = False  # extension, as on chat
