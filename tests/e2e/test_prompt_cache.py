"""The prompt cache through the real server: by default a hit restores only rows the
startup check proved exact; with `--prompt-cache-hits any` a later chat turn reports its
cached tokens; the cache shows in metrics and settings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from drafter.decoding import CPU_PREFILL_STEP
from tests.e2e.conftest import http_client, tiny_server
from tests.e2e.test_completions import NO_EOS


@pytest.fixture(scope="module")
def any_prefix(
    tiny_model: Path, model_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[httpx.Client]:
    """A server whose hits take every shared prefix."""
    log = tmp_path_factory.mktemp("any-prefix") / "server.log"
    process = tiny_server(tiny_model, model_cache, log, "--prompt-cache-hits", "any")
    with process.running() as ready, http_client(ready) as client:
        yield client


TURN_1 = [{"role": "user", "content": "Name three prime numbers, please."}]


def chat(http: httpx.Client, messages: list[dict[str, str]]) -> dict:
    body = {"messages": messages, "max_tokens": 8, "temperature": 0, "logit_bias": NO_EOS}
    response = http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_by_default_a_repeated_prompt_hits_only_where_the_startup_check_allows(
    http: httpx.Client,
) -> None:
    """The default server reports the step its check chose: 1, or the CPU's prefill chunk
    (this suite runs on a CPU); a short prompt sent twice is a hit of all but its last
    token at step 1 and a miss at the chunk, and answers the same."""
    step = http.get("/health").json()["speculative"]["prompt_cache_step"]
    assert step in (1, CPU_PREFILL_STEP)
    body = {"prompt": "Twice the same, with the default hits.", "max_tokens": 6, "temperature": 0}
    first = http.post("/v1/completions", json=body).json()
    again = http.post("/v1/completions", json=body).json()
    usage = again["usage"]
    assert usage["prompt_tokens"] <= CPU_PREFILL_STEP
    expected = usage["prompt_tokens"] - 1 if step == 1 else 0
    assert usage["prompt_tokens_details"]["cached_tokens"] == expected
    assert again["choices"][0]["text"] == first["choices"][0]["text"]


def test_a_second_chat_turn_reports_the_first_turns_prompt_as_cached(
    any_prefix: httpx.Client,
) -> None:
    http = any_prefix
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


def test_completions_report_cached_tokens_too(any_prefix: httpx.Client) -> None:
    http = any_prefix
    body = {"prompt": "The same long prompt, twice over.", "max_tokens": 2, "temperature": 0}
    http.post("/v1/completions", json=body)
    usage = http.post("/v1/completions", json=body).json()["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"] - 1


def test_the_cache_is_counted_in_metrics(any_prefix: httpx.Client) -> None:
    http = any_prefix
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
