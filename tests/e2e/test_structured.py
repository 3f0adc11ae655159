"""Structured outputs through the real server process: response_format (json_object,
json_schema from the SDK's `parse`), forced tool calls, LangChain's
`with_structured_output`, and greedy speculation under a schema equal to classic."""

from __future__ import annotations

import json
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

from drafter.dflash import write_random_drafter
from tests.e2e.conftest import API_KEY
from tests.e2e.serverproc import ServerProcess, clean_environ

HELLO: Any = [{"role": "user", "content": "Describe a person."}]


class Colour(StrEnum):
    red = "red"
    blue = "blue"


class Pet(BaseModel):
    name: str = Field(max_length=5)
    legs: int = Field(ge=0, le=8)


class Person(BaseModel):
    name: str = Field(max_length=6)
    age: int = Field(ge=0, le=120)
    colour: Colour
    pets: list[Pet] = Field(max_length=2)


class Point(BaseModel):
    x: int = Field(ge=-9, le=9)
    y: int = Field(ge=-9, le=9)


POINT = {**Point.model_json_schema(), "additionalProperties": False}  # a strict schema


@pytest.fixture(scope="module")
def speculative(
    tiny_model: Path, model_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    drafter = write_random_drafter(model_cache / "structured-drafter", tiny_model, seed=5)
    process = ServerProcess.on_free_port(
        ["--model", str(tiny_model), "--draft-model", str(drafter), "--draft-block-size", "4"],
        clean_environ(DRAFTWISE_CACHE_DIR=str(model_cache), DRAFTWISE_API_KEY=API_KEY),
        tmp_path_factory.mktemp("structured-server") / "server.log",
        API_KEY,
    )
    with process.running() as ready:
        yield ready


def sdk(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=API_KEY, max_retries=0)


@pytest.mark.parametrize("schema", [Person, Point, Pet])
def test_the_sdks_parse_returns_a_valid_object_on_both_servers(
    server: ServerProcess, speculative: ServerProcess, model_id: str, schema: type[BaseModel]
) -> None:
    texts = []
    for each in (server, speculative):
        completion = sdk(each).chat.completions.parse(
            model=model_id, messages=HELLO, response_format=schema, max_tokens=120, temperature=0
        )
        choice = completion.choices[0]
        assert choice.finish_reason == "stop"
        assert isinstance(choice.message.parsed, schema)
        texts.append(choice.message.content)
    assert texts[0] == texts[1]  # greedy speculation under the schema is classic's text


def test_json_object_answers_parse_as_an_object(client: openai.OpenAI, model_id: str) -> None:
    completion = client.chat.completions.create(
        model=model_id,
        messages=HELLO,
        response_format={"type": "json_object"},
        max_tokens=200,
        temperature=0,
    )
    text = completion.choices[0].message.content or ""
    if completion.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    assert text.startswith("{")


def test_completions_take_a_json_schema_too(http: httpx.Client) -> None:
    schema = POINT
    body = {
        "prompt": "A point:",
        "max_tokens": 120,
        "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}},
    }
    answer = http.post("/v1/completions", json=body).json()
    Point.model_validate_json(answer["choices"][0]["text"])
    assert answer["choices"][0]["finish_reason"] == "stop"


TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 8}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "add",
            "parameters": POINT,
        },
    },
]


@pytest.mark.parametrize(
    ("choice", "names"),
    [
        ("required", {"get_weather", "add"}),
        ({"type": "function", "function": {"name": "add"}}, {"add"}),
    ],
)
def test_a_forced_tool_call_is_a_valid_call(
    client: openai.OpenAI, model_id: str, choice: Any, names: set[str]
) -> None:
    completion = client.chat.completions.create(
        model=model_id, messages=HELLO, tools=TOOLS, tool_choice=choice, max_tokens=200
    )
    answer = completion.choices[0]
    assert answer.finish_reason == "tool_calls"
    [call] = answer.message.tool_calls or []
    assert call.function.name in names  # type: ignore[union-attr]
    arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
    if call.function.name == "add":  # type: ignore[union-attr]
        Point.model_validate(arguments)
    else:
        assert set(arguments) == {"city"} and len(arguments["city"]) <= 8


def test_the_responses_api_forces_a_function_call(client: openai.OpenAI) -> None:
    tools: Any = [{"type": "function", "name": "add", "parameters": POINT}]
    response = client.responses.create(
        input="Add two numbers.", tools=tools, tool_choice="required", max_output_tokens=200
    )
    [call] = response.output
    assert call.type == "function_call" and call.name == "add"
    Point.model_validate_json(call.arguments)
    assert response.status == "completed"


def test_langchain_with_structured_output(server: ServerProcess, model_id: str) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        base_url=f"{server.base_url}/v1", api_key=API_KEY, model=model_id, temperature=0,
        max_tokens=120, max_retries=0,
    )  # fmt: skip
    structured = llm.with_structured_output(Person, method="json_schema")
    person = structured.invoke("Describe a person.")
    assert isinstance(person, Person)


BAD_FORMATS: list[tuple[Any, str]] = [
    ({"type": "json_schema", "json_schema": {"name": "x"}}, "response_format.json_schema"),
    ({"type": "json_schema", "json_schema": {"schema": {"type": "nope"}}}, "response_format"),
    ({"type": "yaml"}, "response_format.type"),
]


@pytest.mark.parametrize(("response_format", "param"), BAD_FORMATS)
def test_a_bad_response_format_is_a_400_naming_it_and_queues_nothing(
    http: httpx.Client, response_format: Any, param: str
) -> None:
    body = {"messages": HELLO, "max_tokens": 4, "response_format": response_format}
    answer = http.post("/v1/chat/completions", json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param


def test_the_responses_apis_parse_returns_a_valid_object(
    client: openai.OpenAI, model_id: str
) -> None:
    response = client.responses.parse(
        model=model_id, input="A point.", text_format=Point, max_output_tokens=60
    )
    assert response.status == "completed"
    assert isinstance(response.output_parsed, Point)
