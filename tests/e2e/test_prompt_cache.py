"""The prompt cache through the real server: a later chat turn reports its cached
tokens, answers as an uncached server does, and the cache shows in metrics and settings."""

from __future__ import annotations

import httpx

from tests.e2e.test_completions import NO_EOS

TURN_1 = [{"role": "user", "content": "Name three prime numbers, please."}]


def chat(http: httpx.Client, messages: list[dict[str, str]]) -> dict:
    body = {"messages": messages, "max_tokens": 8, "temperature": 0, "logit_bias": NO_EOS}
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_second_chat_turn_reports_the_first_turns_prompt_as_cached(http: httpx.Client) -> None:
    first = chat(http, TURN_1)
    answer = first["choices"][0]["message"]["content"]
    turn_2 = [
        *TURN_1,
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "More."},
    ]
    second = chat(http, turn_2)
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert first["usage"]["prompt_tokens"] - 1 <= cached < second["usage"]["prompt_tokens"]


def test_completions_report_cached_tokens_too(http: httpx.Client) -> None:
    body = {"prompt": "The same long prompt, twice over.", "max_tokens": 2, "temperature": 0}
    http.post("/v1/completions", json=body)
    usage = http.post("/v1/completions", json=body).json()["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"] - 1


def test_the_cache_is_counted_in_metrics(http: httpx.Client) -> None:
    http.post("/v1/completions", json={"prompt": "metrics metrics", "max_tokens": 1})
    http.post("/v1/completions", json={"prompt": "metrics metrics", "max_tokens": 1})
    text = http.get("/metrics").text
    values = {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("draftwise_prompt_cache")
    }
    assert values["draftwise_prompt_cache_hits_total"] >= 1
    assert values["draftwise_prompt_cache_misses_total"] >= 1
    assert values["draftwise_prompt_cache_cached_tokens_total"] >= 1
    assert values["draftwise_prompt_cache_bytes"] > 0


def test_the_budget_is_a_worker_owned_setting(http: httpx.Client) -> None:
    entry = http.get("/v1/settings").json()["settings"]["prompt_cache_bytes"]
    assert entry["value"] > 0 and entry["live"] is False
    assert entry["reason"] == "owned by the model worker; restart required"
    response = http.patch("/v1/settings", json={"prompt_cache_bytes": 0})
    assert response.status_code == 409
