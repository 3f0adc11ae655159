"""A validated CompletionRequest becomes a CompletionPlan, or a 400 naming the param.

Runs on the event loop: it tokenizes (no MLX) and checks everything that can
be checked before the request waits in the queue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from drafter.grammar import GrammarError, Grammars, json_schema_grammar
from drafter.sampling import SamplingParams
from server.errors import invalid
from server.events import ChoicePlan, CompletionPlan
from server.schemas import MAX_CHOICES, MAX_STOPS, CompletionRequest
from server.settings import LiveSettings

SEED_SPACE = 2**64


@dataclass(frozen=True)
class ModelFacts:
    """What planning needs to know about the loaded model, read once at load time."""

    model_id: str
    tokenizer: Any
    vocab_size: int
    context_length: int
    grammars: Callable[[], Grammars] | None = None  # the engine's; None: no structured output


def build_plan(
    body: CompletionRequest,
    model: ModelFacts,
    live: LiveSettings,
    grammar: str | None = None,
    grammar_param: str = "response_format",
) -> CompletionPlan:
    """grammar: what the output must match (a chat's forced tool call), else what
    `response_format` asks for; checked here, so one that does not compile is a 400
    naming `grammar_param` and never reaches the worker."""
    check_unsupported(body)
    if grammar is None:
        grammar, grammar_param = format_grammar(body), "response_format"
    if grammar is not None:
        check_grammar(grammar, model, grammar_param)
    n = body.n or 1
    prompts = tokenize_prompts(body.prompt, model)
    if len(prompts) * n > MAX_CHOICES:
        message = f"{len(prompts)} prompts x n={n} is over {MAX_CHOICES} choices per request"
        raise invalid(message, "n" if n > 1 else "prompt", "too_many_choices")
    max_tokens = live.default_max_tokens if body.max_tokens is None else body.max_tokens
    for prompt in prompts:
        check_context(len(prompt), max_tokens, model.context_length)
    logit_bias = parse_logit_bias(body.logit_bias, model.vocab_size)
    choices = []
    for p in range(len(prompts)):
        for j in range(n):
            params = SamplingParams(
                temperature=live.default_temperature
                if body.temperature is None
                else body.temperature,
                top_p=live.default_top_p if body.top_p is None else body.top_p,
                seed=None if body.seed is None else (body.seed + j) % SEED_SPACE,
                presence_penalty=body.presence_penalty or 0.0,
                frequency_penalty=body.frequency_penalty or 0.0,
                logit_bias=logit_bias,
                logprobs=body.logprobs,
                grammar=grammar,
            )
            choices.append(ChoicePlan(index=p * n + j, prompt=p, params=params))
    return CompletionPlan(
        prompts=prompts,
        choices=choices,
        max_tokens=max_tokens,
        stop=parse_stop(body.stop),
        echo=bool(body.echo),
        logprobs=body.logprobs,
        ignore_eos=bool(body.ignore_eos),
    )


def check_unsupported(body: CompletionRequest) -> None:
    if body.suffix:
        raise invalid("suffix is not supported by this server", "suffix", "unsupported_parameter")
    if body.best_of is not None and body.best_of != (body.n or 1):
        raise invalid("best_of must equal n (or be omitted)", "best_of", "unsupported_parameter")
    if body.stream_options is not None and not body.stream:
        raise invalid("stream_options is only allowed when stream is true", "stream_options")


def tokenize_prompts(prompt: Any, model: ModelFacts) -> list[list[int]]:
    if isinstance(prompt, str):
        prompts = [model.tokenizer.encode(prompt)]
    elif not prompt:
        raise invalid("prompt must not be an empty list", "prompt")
    elif isinstance(prompt[0], str):
        prompts = [model.tokenizer.encode(text) for text in prompt]
    elif isinstance(prompt[0], int):
        prompts = [list(prompt)]
    else:
        prompts = [list(tokens) for tokens in prompt]
    for tokens in prompts:
        if not tokens:
            raise invalid("prompt must contain at least one token", "prompt")
        bad = next((t for t in tokens if not 0 <= t < model.vocab_size), None)
        if bad is not None:
            raise invalid(
                f"prompt token id {bad} is outside the vocabulary (0..{model.vocab_size - 1})",
                "prompt",
            )
    return prompts


def check_context(prompt_tokens: int, max_tokens: int, context_length: int) -> None:
    if prompt_tokens + max_tokens <= context_length:
        return
    param = "prompt" if prompt_tokens > context_length else "max_tokens"
    raise invalid(
        f"This model's maximum context length is {context_length} tokens, however you "
        f"requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in your prompt; "
        f"{max_tokens} for the completion). Please reduce your prompt or max_tokens.",
        param,
        "context_length_exceeded",
    )


def parse_stop(stop: str | list[str] | None) -> tuple[str, ...]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > MAX_STOPS:
        raise invalid(f"stop takes at most {MAX_STOPS} sequences, got {len(stops)}", "stop")
    if any(not s for s in stops):
        raise invalid("stop sequences must not be empty strings", "stop")
    return tuple(stops)


def parse_logit_bias(bias: dict[str, float] | None, vocab_size: int) -> dict[int, float]:
    parsed: dict[int, float] = {}
    for key, value in (bias or {}).items():
        token = int(key) if key.strip().lstrip("-").isdigit() else None
        if token is None or not 0 <= token < vocab_size:
            raise invalid(
                f"logit_bias key {key!r} is not a token id in 0..{vocab_size - 1}", "logit_bias"
            )
        if not -100.0 <= value <= 100.0:
            message = f"logit_bias value {value} for token {key} is outside -100..100"
            raise invalid(message, "logit_bias")
        parsed[token] = value
    return parsed


def format_grammar(body: CompletionRequest) -> str | None:
    """The grammar `response_format` asks for: None for text."""
    response_format = body.response_format
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        schema: dict[str, Any] = {"type": "object"}
    elif response_format.type == "json_schema":
        spec = response_format.json_schema
        if spec is None or spec.schema_ is None:
            raise invalid("json_schema needs a schema object", "response_format.json_schema")
        schema = spec.schema_
    else:
        message = f"response_format type {response_format.type!r} is not one of text, "
        raise invalid(message + "json_object, json_schema", "response_format.type")
    try:
        return json_schema_grammar(schema)
    except GrammarError as error:
        raise invalid(f"the schema does not compile: {error}", "response_format") from None


def check_grammar(grammar: str, model: ModelFacts, param: str) -> None:
    if model.grammars is None:
        raise invalid(
            "structured output is not served for this model", param, "unsupported_parameter"
        )
    try:
        grammars = model.grammars()
    except ValueError as error:  # llguidance reads fast (Hugging Face) tokenizers only
        message = f"structured output is not served for this model's tokenizer: {error}"
        raise invalid(message, param, "unsupported_parameter") from None
    try:
        grammars.compile(grammar)
    except GrammarError as error:
        raise invalid(f"the schema does not compile: {error}", param) from None
