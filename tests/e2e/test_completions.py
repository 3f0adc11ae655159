"""/v1/completions through the real server process, with the openai SDK and httpx."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai

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


def test_the_readme_call_answers_with_text(client: openai.OpenAI, model_id: str):
    completion = client.completions.create(model=model_id, prompt="def fib(n):", max_tokens=16)
    choice = completion.choices[0]
    assert completion.object == "text_completion"
    assert completion.model == model_id
    assert choice.text
    assert choice.finish_reason in ("stop", "length")
    assert completion.usage.prompt_tokens == len(b"def fib(n):")
    assert 1 <= completion.usage.completion_tokens <= 16


def test_streamed_text_equals_the_non_streamed_text_at_temperature_0(
    client: openai.OpenAI, model_id: str
):
    args = dict(model=model_id, prompt="def fib(n):", max_tokens=12, temperature=0)
    whole = client.completions.create(**args, logit_bias=NO_EOS)
    chunks = list(
        client.completions.create(
            **args, logit_bias=NO_EOS, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens == 12
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
