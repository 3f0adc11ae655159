"""/v1/responses through the real server process, with the openai SDK and httpx: the
same chat path as /v1/chat/completions, rendered as the Responses API."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response

from tests.e2e.test_errors import error_of

NO_EOS = {"ignore_eos": True}  # the tiny model runs to max_output_tokens: lengths are exact


def test_a_text_response_validates_and_counts_its_tokens(client: openai.OpenAI) -> None:
    response = client.responses.create(
        input="Say hello.", max_output_tokens=6, temperature=0, extra_body=NO_EOS
    )
    assert isinstance(response, Response)
    assert response.object == "response"
    assert response.status == "incomplete"  # ran to the token limit
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 6
    prompt = b"<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n"
    assert response.usage.input_tokens == len(prompt)
    assert response.usage.total_tokens == len(prompt) + 6
    [item] = response.output
    assert item.type == "message" and item.role == "assistant" and item.status == "incomplete"
    assert response.output_text == item.content[0].text  # type: ignore[union-attr]
    assert response.output_text


def test_a_response_that_ends_by_itself_is_completed(http: httpx.Client) -> None:
    body = {"input": "Say hello.", "max_output_tokens": 64, "logit_bias": {"256": 100}}
    found = Response.model_validate(http.post("/v1/responses", json=body).json())
    assert found.status == "completed" and found.incomplete_details is None
    assert found.usage is not None and found.usage.output_tokens == 1  # the end token
    assert found.output_text == ""


def test_the_same_prompt_gives_the_same_text_on_responses_and_chat(
    client: openai.OpenAI, model_id: str
) -> None:
    instructions = "Answer in one word."
    messages: Any = [
        {"role": "system", "content": instructions},
        {"role": "user", "content": "Name a colour."},
    ]
    chat = client.chat.completions.create(
        model=model_id, messages=messages, max_tokens=12, temperature=0, extra_body=NO_EOS
    )
    response = client.responses.create(
        model=model_id,
        instructions=instructions,
        input="Name a colour.",
        max_output_tokens=12,
        temperature=0,
        extra_body=NO_EOS,
    )
    assert response.output_text == chat.choices[0].message.content
    assert response.usage is not None and chat.usage is not None
    assert response.usage.input_tokens == chat.usage.prompt_tokens


def test_a_message_list_input_is_the_chat_messages(client: openai.OpenAI) -> None:
    turns: Any = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
        {"type": "message", "role": "user", "content": "And again?"},
    ]
    response = client.responses.create(
        input=turns, max_output_tokens=4, temperature=0, extra_body=NO_EOS
    )
    chat = client.chat.completions.create(
        model=response.model,
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "And again?"},
        ],
        max_tokens=4,
        temperature=0,
        extra_body=NO_EOS,
    )
    assert response.usage is not None and chat.usage is not None
    assert response.usage.input_tokens == chat.usage.prompt_tokens
    assert response.output_text == chat.choices[0].message.content


def test_a_function_call_and_its_output_are_rendered_as_tool_turns(client: openai.OpenAI) -> None:
    tools: Any = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    turns: Any = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ]
    with_tools = client.responses.create(input=turns, tools=tools, max_output_tokens=2)
    plain = client.responses.create(input=turns[:1], max_output_tokens=2)
    assert with_tools.usage is not None and plain.usage is not None
    assert with_tools.usage.input_tokens > plain.usage.input_tokens
    assert [tool.name for tool in with_tools.tools] == ["get_weather"]  # type: ignore[union-attr]


def test_streamed_events_follow_the_sdks_sequence_and_add_up_to_the_text(
    client: openai.OpenAI,
) -> None:
    args: Any = dict(input="Say hello.", max_output_tokens=8, temperature=0, extra_body=NO_EOS)
    whole = client.responses.create(**args)
    events = list(client.responses.create(**args, stream=True))
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response  # type: ignore[union-attr]
    assert deltas == final.output_text == whole.output_text and deltas
    assert final.usage is not None and final.usage.output_tokens == 8


def test_the_sdks_stream_helper_assembles_the_final_response(
    client: openai.OpenAI, model_id: str, letters: dict[str, float]
) -> None:
    """A stop string ends it (status completed, which the helper waits for)."""
    extra = {"logit_bias": letters, "stop": list("aeio")}
    with client.responses.stream(
        model=model_id, input="Say hello.", max_output_tokens=64, temperature=0, extra_body=extra
    ) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert final.status == "completed" and final.output_text == text
    assert final.usage is not None and final.usage.output_tokens < 64
    assert not set(text) & set("aeio") and set(text) <= set("abcdefghijklmnopqrstuvwxyz")


BAD_BODIES: list[tuple[dict[str, Any], str]] = [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"store": True}, "store"),
    ({"background": True}, "background"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"tools": [{"type": "function"}]}, "tools[0].name"),
    ({"tool_choice": {"type": "file_search"}}, "tool_choice"),
    ({"text": {"format": {"type": "xml"}}}, "text.format"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    (
        {"input": [{"role": "user", "content": [{"type": "input_image"}]}]},
        "input[0].content[0].type",
    ),
    ({"input": [{"type": "reasoning"}]}, "input[0].type"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"input": []}, "input"),
    ({"input": 7}, "input"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"temperature": "hot"}, "temperature"),
]


@pytest.mark.parametrize(("fields", "param"), BAD_BODIES)
def test_malformed_or_unserved_bodies_are_400_naming_the_field(
    http: httpx.Client, fields: dict[str, Any], param: str
) -> None:
    body = {"input": "hi", "max_output_tokens": 1, **fields}
    error = error_of(http.post("/v1/responses", json=body), 400)
    assert error["param"] == param


def test_a_body_without_input_is_400(http: httpx.Client) -> None:
    assert error_of(http.post("/v1/responses", json={"model": "x"}), 400)["param"] == "input"
