"""Chat rendering and reading: the template, content parts, and tool calls cut out of
token streams (server/chat.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mlx_lm import load
from mlx_lm.tokenizer_utils import TokenizerWrapper

from drafter.checkpoints.tiny import write_tiny_model
from server.chat import ChoiceState, ToolCallParser, chat_logprobs, render
from server.errors import APIError
from server.schemas import ChatCompletionRequest

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


def feed_all(state: ChoiceState, pieces: list[str]) -> list[dict]:
    deltas = [d for piece in pieces for d in state.deltas(piece)]
    return deltas + state.deltas("", final=True)


def pieces_of(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_a_tool_call_split_across_chunks_is_one_call_and_no_text(size: int) -> None:
    state = ChoiceState(ToolCallParser())
    deltas = feed_all(state, pieces_of(CALL, size))
    assert state.content == ""
    assert [d["tool_calls"][0]["function"] for d in deltas if "tool_calls" in d] == [
        {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}
    ]
    assert state.finish_reason("stop") == "tool_calls"
    assert state.message()["content"] is None


def test_two_calls_in_one_answer_get_indexes_0_and_1_and_text_before_is_content() -> None:
    state = ChoiceState(ToolCallParser())
    text = "Let me check.\n" + CALL + "\n" + CALL.replace("Paris", "Rome")
    feed_all(state, pieces_of(text, 4))
    assert state.content == "Let me check.\n\n"
    assert [c["index"] for c in state.tool_calls] == [0, 1]
    assert json.loads(state.tool_calls[1]["function"]["arguments"]) == {"city": "Rome"}
    assert state.tool_calls[0]["id"] != state.tool_calls[1]["id"]


def test_malformed_json_inside_a_tool_call_is_returned_as_text() -> None:
    state = ChoiceState(ToolCallParser())
    text = "<tool_call>{not json}</tool_call> done"
    feed_all(state, pieces_of(text, 5))
    assert state.content == text
    assert state.tool_calls == []
    assert state.finish_reason("stop") == "stop"


def test_an_unclosed_tool_call_is_released_as_text_at_the_end() -> None:
    state = ChoiceState(ToolCallParser())
    feed_all(state, ["a <tool", '_call>{"name": '])
    assert state.content == 'a <tool_call>{"name": '


def test_streamed_deltas_reassemble_into_the_non_streamed_message() -> None:
    text = "Sure. " + CALL + " ok <tool_c"
    streamed = ChoiceState(ToolCallParser())
    deltas = feed_all(streamed, pieces_of(text, 3))
    whole = ChoiceState(ToolCallParser())
    feed_all(whole, [text])
    content = "".join(d.get("content", "") for d in deltas)
    calls = [d["tool_calls"][0]["function"] for d in deltas if "tool_calls" in d]
    assert content == whole.message()["content"] == "Sure.  ok <tool_c"
    assert calls == [c["function"] for c in whole.message()["tool_calls"]]


def test_without_tools_tool_call_text_is_plain_content() -> None:
    state = ChoiceState(None)
    feed_all(state, [CALL])
    assert state.content == CALL and state.tool_calls == []


def test_chat_logprobs_have_token_logprob_bytes_and_top_logprobs() -> None:
    legacy: dict[str, list[Any]] = {
        "tokens": ["é", "b"],
        "token_logprobs": [-0.5, -1.0],
        "top_logprobs": [{"é": -0.5, "x": -2.0}, None],
        "text_offset": [0, 1],
    }
    first, second = chat_logprobs(legacy)
    assert first == {
        "token": "é",
        "logprob": -0.5,
        "bytes": [0xC3, 0xA9],
        "top_logprobs": [
            {"token": "é", "logprob": -0.5, "bytes": [0xC3, 0xA9]},
            {"token": "x", "logprob": -2.0, "bytes": [0x78]},
        ],
    }
    assert second["top_logprobs"] == []


@pytest.fixture(scope="module")
def tokenizers(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[TokenizerWrapper, TokenizerWrapper]:
    root = tmp_path_factory.mktemp("chat")
    with_template = load(str(write_tiny_model(Path(root) / "with")))[1]
    without = load(str(write_tiny_model(Path(root) / "without", chat_template=None)))[1]
    return with_template, without


def request(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": "hi"}], **fields}
    )


def test_render_uses_the_template_with_the_generation_prompt(
    tokenizers: tuple[TokenizerWrapper, TokenizerWrapper],
) -> None:
    tokenizer = tokenizers[0]
    rendered = render(request(), tokenizer)
    ids, parse_tools = rendered.prompt, rendered.parse_tools
    assert tokenizer.decode(ids) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert parse_tools is False


def test_text_parts_are_joined_and_tools_reach_the_template(
    tokenizers: tuple[TokenizerWrapper, TokenizerWrapper],
) -> None:
    body = request(
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            }
        ],
        tools=TOOLS,
    )
    rendered = render(body, tokenizers[0])
    ids, parse_tools = rendered.prompt, rendered.parse_tools
    text = tokenizers[0].decode(ids)
    assert "get_weather" in text and "user\nab<|im_end|>" in text
    assert parse_tools is True


def test_tool_choice_none_hides_the_tools(
    tokenizers: tuple[TokenizerWrapper, TokenizerWrapper],
) -> None:
    rendered = render(request(tools=TOOLS, tool_choice="none"), tokenizers[0])
    ids, parse_tools = rendered.prompt, rendered.parse_tools
    assert "get_weather" not in tokenizers[0].decode(ids) and parse_tools is False


def test_a_multi_turn_tool_exchange_renders_calls_and_responses(
    tokenizers: tuple[TokenizerWrapper, TokenizerWrapper],
) -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    body = request(
        messages=[
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
        ],
        tools=TOOLS,
    )
    text = tokenizers[0].decode(render(body, tokenizers[0]).prompt)
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in text
    assert "<tool_response>\nsunny\n</tool_response>" in text


@pytest.mark.parametrize(
    ("fields", "param", "which"),
    [
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages", 0),
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
            0,
        ),
        ({}, "messages", 1),
    ],
    ids=["image-part", "unknown-named-tool", "no-template"],
)
def test_what_cannot_be_rendered_is_a_400_naming_the_field(
    tokenizers: tuple[TokenizerWrapper, TokenizerWrapper],
    fields: dict[str, Any],
    param: str,
    which: int,
) -> None:
    with pytest.raises(APIError) as raised:
        render(request(**fields), tokenizers[which])
    assert raised.value.status == 400 and raised.value.param == param


NO_TOOLS_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_template_without_tools_gets_them_in_a_system_turn(tmp_path: Path) -> None:
    tokenizer = load(str(write_tiny_model(tmp_path / "m", chat_template=NO_TOOLS_TEMPLATE)))[1]
    system = {"role": "system", "content": "Be brief."}
    body = request(messages=[system, {"role": "user", "content": "hi"}], tools=TOOLS)
    rendered = render(body, tokenizer)
    text = tokenizer.decode(rendered.prompt)
    assert text.startswith("<|im_start|>system\nBe brief.\n\nYou can call the tools below.")
    assert '{"name": "get_weather", "parameters": {}}' in text and "<tool_call>" in text
    assert rendered.parse_tools and rendered.grammar is None
    alone = render(request(tools=TOOLS, tool_choice="required"), tokenizer)
    assert tokenizer.decode(alone.prompt).startswith("<|im_start|>system\nYou can call")
    assert alone.grammar is not None


def test_forced_choices_come_with_a_grammar_and_auto_or_none_without(
    tokenizers: tuple[TokenizerWrapper, TokenizerWrapper],
) -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    for choice, forced in (("auto", False), ("none", False), ("required", True), (named, True)):
        rendered = render(request(tools=TOOLS, tool_choice=choice), tokenizers[0])
        assert (rendered.grammar is not None) == forced
