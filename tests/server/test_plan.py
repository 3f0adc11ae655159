"""Planning structured output (server/plan.py): what `response_format` asks for, and the
400s for what cannot be served, before anything is queued."""

from __future__ import annotations

from typing import Any

import pytest
from mlx_lm import load

from drafter.checkpoints.tiny import write_tiny_model
from drafter.grammar import Grammars
from server.errors import APIError
from server.plan import ModelFacts, build_plan
from server.schemas import CompletionRequest
from server.settings import LiveSettings

VOCAB = 257  # the tiny model's: 256 bytes and the end token


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return load(str(write_tiny_model(tmp_path_factory.mktemp("plan") / "m")))[1]


def facts(tokenizer: Any, grammars: Any) -> ModelFacts:
    return ModelFacts("tiny", tokenizer, VOCAB, 2048, grammars)


def plan_of(facts: ModelFacts, response_format: dict[str, Any]) -> Any:
    body = CompletionRequest.model_validate({"prompt": "hi", "response_format": response_format})
    return build_plan(body, facts, LiveSettings())


def test_a_json_format_puts_its_grammar_on_every_choice(tokenizer: Any) -> None:
    grammars = Grammars(tokenizer._tokenizer, VOCAB, [256])
    plan = plan_of(facts(tokenizer, lambda: grammars), {"type": "json_object"})
    assert all(choice.params.grammar for choice in plan.choices)
    assert (
        plan_of(facts(tokenizer, lambda: grammars), {"type": "text"}).choices[0].params.grammar
        is None
    )


def test_a_tokenizer_llguidance_cannot_read_is_a_400_not_a_500(tokenizer: Any) -> None:
    def unreadable() -> Grammars:
        raise ValueError("Only fast tokenizers are supported")

    with pytest.raises(APIError) as raised:
        plan_of(facts(tokenizer, unreadable), {"type": "json_object"})
    assert (raised.value.status, raised.value.param) == (400, "response_format")
    with pytest.raises(APIError) as raised:
        plan_of(facts(tokenizer, None), {"type": "json_object"})
    assert (raised.value.status, raised.value.param) == (400, "response_format")


def test_a_schema_that_does_not_compile_is_a_400_naming_response_format(tokenizer: Any) -> None:
    grammars = Grammars(tokenizer._tokenizer, VOCAB, [256])
    bad = {"type": "json_schema", "json_schema": {"schema": {"type": "string", "pattern": "("}}}
    with pytest.raises(APIError) as raised:
        plan_of(facts(tokenizer, lambda: grammars), bad)
    assert (raised.value.status, raised.value.param) == (400, "response_format")
