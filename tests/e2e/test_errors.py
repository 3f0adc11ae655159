"""Bad input is a 400 in OpenAI's envelope naming the param; never a 422 or a 500."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import API_KEY
from tests.e2e.serverproc import ServerProcess

CONTEXT = 2048  # the tiny model's max_position_embeddings


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


MISSING = object()
BAD_BODIES = [
    ({"prompt": MISSING}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [[]]}, "prompt"),
    ({"prompt": [1, "a"]}, "prompt"),
    ({"prompt": [10**6]}, "prompt"),
    ({"max_tokens": "16"}, "max_tokens"),
    ({"max_tokens": -1}, "max_tokens"),
    ({"max_tokens": 1.5}, "max_tokens"),
    ({"temperature": 2.5}, "temperature"),
    ({"temperature": "hot"}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"n": 0}, "n"),
    ({"n": 1000}, "n"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"stop": [""]}, "stop"),
    ({"stop": 3}, "stop"),
    ({"seed": "x"}, "seed"),
    ({"seed": 2**70}, "seed"),
    ({"logprobs": 21}, "logprobs"),
    ({"logprobs": True}, "logprobs"),
    ({"echo": "yes"}, "echo"),
    ({"stream": "yes"}, "stream"),
    ({"presence_penalty": 3}, "presence_penalty"),
    ({"frequency_penalty": -3}, "frequency_penalty"),
    ({"logit_bias": {"abc": 1}}, "logit_bias"),
    ({"logit_bias": {"999999": 1}}, "logit_bias"),
    ({"logit_bias": {"5": 500}}, "logit_bias"),
    ({"logit_bias": [1]}, "logit_bias"),
    ({"user": 5}, "user"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"suffix": "tail"}, "suffix"),
    ({"best_of": 3}, "best_of"),
]


@pytest.mark.parametrize(("fields", "param"), BAD_BODIES)
def test_invalid_fields_are_400_naming_the_param(
    http: httpx.Client, model_id: str, fields: dict[str, Any], param: str
) -> None:
    body = {"model": model_id, "prompt": "a", "max_tokens": 1, **fields}
    body = {name: value for name, value in body.items() if value is not MISSING}
    error = error_of(http.post("/v1/completions", json=body), 400)
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert param in error["message"]


def test_a_body_that_is_not_json_is_400(http: httpx.Client) -> None:
    response = http.post(
        "/v1/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    error = error_of(response, 400)
    assert error["param"] is None
    assert "JSON" in error["message"]


def test_a_body_that_is_not_an_object_is_400(http: httpx.Client) -> None:
    assert error_of(http.post("/v1/completions", json=[1, 2]), 400)["param"] is None


def test_prompt_plus_max_tokens_beyond_the_context_names_both_counts(
    http: httpx.Client, model_id: str
) -> None:
    body = {"model": model_id, "prompt": "abc", "max_tokens": CONTEXT}
    error = error_of(http.post("/v1/completions", json=body), 400)
    assert error["param"] == "max_tokens"
    assert error["code"] == "context_length_exceeded"
    assert f"{CONTEXT} tokens" in error["message"] and f"{CONTEXT + 3} tokens" in error["message"]
    assert "3 in your prompt" in error["message"]


def test_a_prompt_longer_than_the_context_is_400_on_prompt(
    http: httpx.Client, model_id: str
) -> None:
    body = {"model": model_id, "prompt": "a" * (CONTEXT + 1), "max_tokens": 0}
    error = error_of(http.post("/v1/completions", json=body), 400)
    assert error["param"] == "prompt"
    assert f"{CONTEXT + 1} in your prompt" in error["message"]


def test_an_unknown_model_is_404_model_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        client.completions.create(model="no-such-model", prompt="a", max_tokens=1)
    assert raised.value.status_code == 404
    body = raised.value.body
    assert isinstance(body, dict)
    assert body["code"] == "model_not_found" and body["param"] == "model"


def test_the_sdk_raises_bad_request_with_the_param(client: openai.OpenAI, model_id: str) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.completions.create(model=model_id, prompt="a", max_tokens=1, temperature=9)
    body = raised.value.body
    assert isinstance(body, dict) and body["param"] == "temperature"


def test_unknown_routes_use_the_envelope_and_name_the_served_endpoints(http: httpx.Client) -> None:
    error = error_of(http.get("/v1/nothing"), 404)
    assert error["code"] == "not_found"
    assert "/v1/nothing" in error["message"]
    assert "/v1/chat/completions" in error["message"] and "/tokenize" in error["message"]


def test_a_request_without_model_is_served_by_the_loaded_model(
    http: httpx.Client, model_id: str
) -> None:
    response = http.post("/v1/completions", json={"prompt": "a", "max_tokens": 2})
    assert response.status_code == 200, response.text
    assert response.json()["model"] == model_id


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {API_KEY}"}],
    ids=["missing", "wrong", "not-bearer"],
)
@pytest.mark.parametrize("path", ["/v1/models", "/v1/settings"])
def test_a_configured_api_key_is_required_on_v1(
    server: ServerProcess, headers: dict[str, str], path: str
) -> None:
    response = httpx.get(f"{server.base_url}{path}", headers=headers)
    assert error_of(response, 401)["code"] in ("missing_api_key", "invalid_api_key")


def test_a_wrong_key_is_refused_for_completions_by_the_sdk(
    server: ServerProcess, model_id: str
) -> None:
    wrong = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.completions.create(model=model_id, prompt="a", max_tokens=1)


def test_health_and_metrics_need_no_key(server: ServerProcess) -> None:
    assert httpx.get(f"{server.base_url}/health").status_code == 200
    assert httpx.get(f"{server.base_url}/metrics").status_code == 200
