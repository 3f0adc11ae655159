"""/v1/completions through the real server process, with the openai SDK and httpx."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
from tokenizers import Tokenizer

NO_EOS = {"256": -100}  # keep the tiny model from ending early: lengths become exact


def sse_payloads(response: httpx.Response) -> list[Any]:
    """The `data:` payloads of an SSE response, [DONE] included as the string."""
    payloads = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            payloads.append(data if data == "[DONE]" else json.loads(data))
    return payloads


def complete(http: httpx.Client, **body: Any) -> dict[str, Any]:
    response = http.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_the_readme_call_answers_with_text(client: openai.OpenAI, model_id: str) -> None:
    completion = client.completions.create(
        model=model_id, prompt="def fib(n):", max_tokens=16, seed=0
    )
    choice = completion.choices[0]
    assert completion.object == "text_completion"
    assert completion.model == model_id
    assert choice.text
    assert choice.finish_reason in ("stop", "length")
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == len(b"def fib(n):")
    assert 1 <= completion.usage.completion_tokens <= 16


def test_streamed_text_equals_the_non_streamed_text_at_temperature_0(
    client: openai.OpenAI, model_id: str
) -> None:
    args: dict[str, Any] = dict(model=model_id, prompt="def fib(n):", max_tokens=12, temperature=0)
    whole = client.completions.create(**args, logit_bias=NO_EOS)
    chunks = list(
        client.completions.create(
            **args, logit_bias=NO_EOS, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and whole.usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens == 12
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_every_stream_chunk_carries_null_usage_and_the_stream_ends_with_done(
    http: httpx.Client, model_id: str
) -> None:
    body = {"model": model_id, "prompt": "ab", "max_tokens": 4, "temperature": 0, "stream": True}
    body["stream_options"] = {"include_usage": True}
    with http.stream("POST", "/v1/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        payloads = sse_payloads(response)
    *chunks, usage_chunk, done = payloads
    assert done == "[DONE]"
    assert all(c["object"] == "text_completion" and c["usage"] is None for c in chunks)
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["total_tokens"] == 2 + usage_chunk["usage"]["completion_tokens"]


def test_without_include_usage_the_stream_has_no_usage_chunk(
    http: httpx.Client, model_id: str
) -> None:
    body = {"model": model_id, "prompt": "ab", "max_tokens": 3, "stream": True}
    with http.stream("POST", "/v1/completions", json=body) as response:
        *chunks, done = sse_payloads(response)
    assert done == "[DONE]"
    assert all(c["choices"] and c["usage"] is None for c in chunks)


def test_the_same_seed_gives_the_same_sample(http: httpx.Client, model_id: str) -> None:
    body = {"model": model_id, "prompt": "x", "max_tokens": 8, "temperature": 1.0}
    body["logit_bias"] = NO_EOS
    first = complete(http, **body, seed=1234)["choices"][0]["text"]
    again = complete(http, **body, seed=1234)["choices"][0]["text"]
    other = complete(http, **body, seed=99)["choices"][0]["text"]
    assert first == again
    assert other != first


def test_n_samples_per_prompt_are_indexed_prompt_major(http: httpx.Client, model_id: str) -> None:
    body = {"model": model_id, "prompt": ["a", "b"], "n": 2, "max_tokens": 2, "seed": 7}
    choices = complete(http, **body, temperature=1.0)["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2, 3]
    alone = complete(http, **{**body, "prompt": "b"}, temperature=1.0)["choices"]
    assert [c["text"] for c in choices[2:]] == [c["text"] for c in alone]


def test_prompt_may_be_tokens_or_lists_of_tokens(
    http: httpx.Client, model_id: str, tokenizer: Tokenizer
) -> None:
    args = {"model": model_id, "max_tokens": 3, "temperature": 0, "logit_bias": NO_EOS}
    text = complete(http, **args, prompt="hi")["choices"][0]["text"]
    ids = tokenizer.encode("hi").ids
    tokens = complete(http, **args, prompt=ids)
    assert tokens["choices"][0]["text"] == text
    assert tokens["usage"]["prompt_tokens"] == 2
    batch = complete(http, **args, prompt=[ids, ids])["choices"]
    assert [c["text"] for c in batch] == [text, text]


def test_a_stop_string_spanning_tokens_is_cut_and_never_emitted(
    http: httpx.Client, client: openai.OpenAI, model_id: str, letters: dict[str, float]
) -> None:
    # Letters only, so every generated token is one visible character.
    args: dict[str, Any] = {"model": model_id, "prompt": "q", "temperature": 0}
    args["logit_bias"] = letters
    reference = complete(http, **args, max_tokens=24)["choices"][0]["text"]
    assert len(reference) == 24
    stop = reference[9:12]  # three tokens long
    expected = reference[: reference.index(stop)]
    stopped = complete(http, **args, max_tokens=24, stop=[stop, "never-seen"])["choices"][0]
    assert stopped == {**stopped, "text": expected, "finish_reason": "stop"}
    stream = client.completions.create(**args, max_tokens=24, stop=stop, stream=True)
    chunks = [c.choices[0] for c in stream]
    assert "".join(c.text for c in chunks) == expected
    assert chunks[-1].finish_reason == "stop"


def test_logprobs_use_the_legacy_shape(http: httpx.Client, model_id: str) -> None:
    body = {"model": model_id, "prompt": "ab", "max_tokens": 5, "logprobs": 3, "temperature": 0}
    choice = complete(http, **body, logit_bias=NO_EOS)["choices"][0]
    logprobs = choice["logprobs"]
    assert set(logprobs) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert len(logprobs["tokens"]) == 5
    assert all(lp <= 0 for lp in logprobs["token_logprobs"])
    assert all(1 <= len(top) <= 3 for top in logprobs["top_logprobs"])
    # Greedy: the chosen token is the most likely one.
    assert all(
        lp == max(top.values())
        for lp, top in zip(logprobs["token_logprobs"], logprobs["top_logprobs"], strict=True)
    )


def test_echo_with_max_tokens_0_scores_the_prompt_for_loglikelihood(
    client: openai.OpenAI, model_id: str
) -> None:
    prompt = "The cat sat"
    completion = client.completions.create(
        model=model_id, prompt=prompt, max_tokens=0, echo=True, logprobs=1
    )
    choice = completion.choices[0]
    logprobs = choice.logprobs
    assert choice.text == prompt
    assert logprobs is not None and logprobs.tokens is not None
    assert logprobs.token_logprobs is not None and logprobs.top_logprobs is not None
    assert "".join(logprobs.tokens) == prompt
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    assert all(lp < 0 for lp in logprobs.token_logprobs[1:])
    assert logprobs.text_offset == list(range(len(prompt)))
    assert completion.usage is not None and completion.usage.completion_tokens == 0


def test_echo_then_generation_continues_the_offsets(
    http: httpx.Client, model_id: str, letters: dict[str, float]
) -> None:
    body = {"model": model_id, "prompt": "xy", "max_tokens": 3, "echo": True, "logprobs": 0}
    choice = complete(http, **body, temperature=0, logit_bias=letters)["choices"][0]
    assert choice["text"].startswith("xy") and len(choice["text"]) == 5
    assert choice["logprobs"]["text_offset"] == [0, 1, 2, 3, 4]
    assert choice["logprobs"]["top_logprobs"][1:] == [{}, {}, {}, {}]


def test_logit_bias_forces_a_token(http: httpx.Client, model_id: str, tokenizer: Tokenizer) -> None:
    bias = {str(tokenizer.token_to_id("a")): 100}
    body = {"model": model_id, "prompt": "q", "max_tokens": 4, "logit_bias": bias}
    assert complete(http, **body)["choices"][0]["text"] == "aaaa"


def test_frequency_penalty_discourages_repeats(http: httpx.Client, model_id: str) -> None:
    body = {"model": model_id, "prompt": "def", "max_tokens": 12, "temperature": 0}
    body["logprobs"] = 0
    plain = complete(http, **body, logit_bias=NO_EOS)["choices"][0]["logprobs"]["tokens"]
    penalised = complete(http, **body, logit_bias=NO_EOS, frequency_penalty=2.0)
    tokens = penalised["choices"][0]["logprobs"]["tokens"]
    assert len(set(plain)) < len(plain)  # the tiny model repeats itself greedily
    assert tokens != plain


def test_user_is_accepted(http: httpx.Client, model_id: str) -> None:
    assert complete(http, model=model_id, prompt="a", max_tokens=1, user="someone")["choices"]
