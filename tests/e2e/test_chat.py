"""/v1/chat/completions and the tokenizer endpoints through the real server process, with
the openai SDK, httpx and LangChain."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from tokenizers import Tokenizer

from tests.e2e.serverproc import ServerProcess
from tests.e2e.test_completions import NO_EOS, sse_payloads
from tests.e2e.test_errors import error_of

HELLO = [{"role": "user", "content": "Say hello."}]


def chat(http: httpx.Client, **body: Any) -> dict[str, Any]:
    response = http.post("/v1/chat/completions", json={"messages": HELLO, **body})
    assert response.status_code == 200, response.text
    return response.json()


def test_streamed_chat_equals_non_streamed_with_role_first_one_finish_and_usage(
    client: openai.OpenAI, model_id: str
) -> None:
    args: dict[str, Any] = dict(model=model_id, messages=HELLO, max_tokens=10, temperature=0)
    args["logit_bias"] = NO_EOS
    whole = client.chat.completions.create(**args)
    chunks = list(
        client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True})
    )
    assert whole.object == "chat.completion"
    assert whole.choices[0].message.role == "assistant"
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content and text
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == ["length"] == [whole.choices[0].finish_reason]
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and whole.usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens == 10
    assert whole.usage.prompt_tokens == len(
        b"<|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n"
    )


def test_chat_logprobs_validate_against_the_sdk_models(http: httpx.Client) -> None:
    body = chat(http, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2, logit_bias=NO_EOS)
    completion = ChatCompletion.model_validate(body)
    logprobs = completion.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    content = logprobs.content
    assert len(content) == 4
    assert "".join(entry.token for entry in content) == completion.choices[0].message.content
    for entry in content:
        assert entry.bytes is not None
        assert entry.logprob <= 0 and bytes(entry.bytes) == entry.token.encode()
        assert len(entry.top_logprobs) == 2
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob


def test_streamed_chunks_validate_and_carry_their_logprobs(http: httpx.Client) -> None:
    body = {"messages": HELLO, "max_tokens": 3, "temperature": 0, "logprobs": True, "stream": True}
    with http.stream(
        "POST", "/v1/chat/completions", json={**body, "logit_bias": NO_EOS}
    ) as response:
        *chunks, done = sse_payloads(response)
    assert done == "[DONE]"
    parsed = [ChatCompletionChunk.model_validate(c) for c in chunks]
    entries = [
        e for c in parsed for e in ((c.choices[0].logprobs and c.choices[0].logprobs.content) or [])
    ]
    assert len(entries) == 3


def test_n_with_a_seed_repeats(http: httpx.Client) -> None:
    first = chat(http, n=2, seed=11, max_tokens=6, temperature=1.0)
    second = chat(http, n=2, seed=11, max_tokens=6, temperature=1.0)
    assert [c["index"] for c in first["choices"]] == [0, 1]
    assert [c["message"]["content"] for c in first["choices"]] == [
        c["message"]["content"] for c in second["choices"]
    ]


def test_a_stop_string_ends_the_answer_before_it(
    http: httpx.Client, letters: dict[str, float]
) -> None:
    args = {"max_tokens": 12, "temperature": 0, "logit_bias": letters}
    whole = chat(http, **args)["choices"][0]["message"]["content"]
    stop = whole[3:5]
    cut = chat(http, **args, stop=stop)["choices"][0]
    assert cut["finish_reason"] == "stop"
    assert cut["message"]["content"] == whole[: whole.index(stop)]


def test_multi_turn_messages_reach_the_prompt(http: httpx.Client) -> None:
    turns = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": [{"type": "text", "text": "Again"}]},
    ]
    body = chat(http, messages=turns, max_tokens=1)
    rendered = (
        "".join(
            f"<|im_start|>{r}\n{c}<|im_end|>\n"
            for r, c in (
                ("system", "Be brief."),
                ("user", "Hi"),
                ("assistant", "Hello"),
                ("user", "Again"),
            )
        )
        + "<|im_start|>assistant\n"
    )
    assert body["usage"]["prompt_tokens"] == len(rendered.encode())


def test_max_completion_tokens_bounds_the_answer(http: httpx.Client) -> None:
    body = chat(http, max_completion_tokens=3, temperature=0, logit_bias=NO_EOS)
    assert body["usage"]["completion_tokens"] == 3


def test_chat_without_model_is_served_by_the_loaded_model(
    http: httpx.Client, model_id: str
) -> None:
    assert chat(http, max_tokens=1)["model"] == model_id


CHAT_ERRORS = [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages"),
    (
        {
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
            ]
        },
        "messages",
    ),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": 7}}}},
        "response_format",
    ),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"max_completion_tokens": -1}, "max_completion_tokens"),
    ({"temperature": 3}, "temperature"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"tools": [{"type": "function"}]}, "tools"),
    ({"max_tokens": 10**6}, "max_tokens"),
    ({"logit_bias": {"x": 1}}, "logit_bias"),
]


@pytest.mark.parametrize(("fields", "param"), CHAT_ERRORS)
def test_bad_chat_requests_are_400_naming_the_field(
    http: httpx.Client, fields: dict[str, Any], param: str
) -> None:
    body = {"messages": HELLO, "max_tokens": 1, **fields}
    error = error_of(http.post("/v1/chat/completions", json=body), 400)
    assert error["param"] == param


def test_a_wrong_model_is_404_on_chat(http: httpx.Client) -> None:
    body = {"model": "nope", "messages": HELLO}
    assert error_of(http.post("/v1/chat/completions", json=body), 404)["param"] == "model"


def test_tools_render_and_the_answer_is_a_chat_message(http: httpx.Client) -> None:
    tools = [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    ]
    body = chat(http, tools=tools, max_tokens=4, temperature=0)
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] in ("stop", "length", "tool_calls")
    assert body["usage"]["prompt_tokens"] > chat(http, max_tokens=1)["usage"]["prompt_tokens"]


def test_tokenize_and_detokenize_round_trip_in_vllm_shape(http: httpx.Client) -> None:
    tokens = http.post("/tokenize", json={"prompt": "héllo", "add_special_tokens": False}).json()
    assert tokens["tokens"] == list("héllo".encode()) or len(tokens["tokens"]) == len(
        "héllo".encode()
    )
    text = http.post("/detokenize", json={"tokens": tokens["tokens"]}).json()
    assert text == {"prompt": "héllo"}
    assert error_of(http.post("/detokenize", json={"tokens": [10**7]}), 400)["param"] == "tokens"


def test_tokenizer_info_names_the_special_tokens_and_template(http: httpx.Client) -> None:
    info = http.get("/tokenizer_info").json()
    assert info["eos_token"] == "<|endoftext|>"
    assert "<|im_start|>" in info["chat_template"]


def test_legacy_logprobs_include_the_eos_token_that_ended_the_answer(
    http: httpx.Client, tokenizer: Tokenizer
) -> None:
    eos = tokenizer.token_to_id("<|endoftext|>")
    body = {
        "prompt": "a",
        "max_tokens": 5,
        "temperature": 0,
        "logprobs": 1,
        "logit_bias": {str(eos): 100},
    }
    completion = http.post("/v1/completions", json=body).json()
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["text"] == ""
    assert completion["usage"]["completion_tokens"] == 1
    assert choice["logprobs"]["tokens"] == ["<|endoftext|>"]
    assert choice["logprobs"]["token_logprobs"][0] <= 0


def test_langchain_chat_openai_completes_and_streams(server: ServerProcess, model_id: str) -> None:
    from langchain_openai import ChatOpenAI

    from tests.e2e.conftest import API_KEY

    llm = ChatOpenAI(
        base_url=f"{server.base_url}/v1", api_key=API_KEY, model=model_id, temperature=0,
        max_tokens=6, max_retries=0,
    )  # fmt: skip
    answer = llm.invoke("Say hello.")
    streamed = "".join(str(chunk.content) for chunk in llm.stream("Say hello."))
    assert isinstance(answer.content, str)
    assert streamed == answer.content
