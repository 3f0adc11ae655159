"""Admission, cancellation, limits and CORS through the real server process.

One server with a queue of one, a 4 KiB body limit and one CORS origin: a slow
request is a long greedy stream on the tiny model with EOS ignored.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import API_KEY, auth
from tests.e2e.serverproc import ServerProcess, clean_environ

ORIGIN = "http://app.example"
BODY_LIMIT = 4096
LONG = 1500  # tokens: seconds of work on the tiny model, never awaited to the end
# One decoding round of the tiny model takes milliseconds; this bound leaves room
# for a loaded 2-core machine and is still far below the LONG request's run time.
ONE_ROUND_S = 0.5


@pytest.fixture(scope="module")
def tight(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # A batch of one and a queue of one: the second request waits, the third is refused.
    args = ["--model", str(tiny_model), "--max-queue-depth", "1"]
    args += ["--max-batch-size", "1"]
    args += ["--max-body-bytes", str(BODY_LIMIT), "--cors-allow-origins", ORIGIN]
    log = tmp_path_factory.mktemp("tight") / "server.log"
    env = clean_environ(DRAFTWISE_API_KEY=API_KEY)
    process = ServerProcess.on_free_port(args, env, log, API_KEY)
    with process.running() as ready:
        yield ready


@pytest.fixture
def tight_http(tight: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=tight.base_url, headers=auth(), timeout=30.0) as client:
        yield client


def body(model: str, max_tokens: int = LONG, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": "ab",
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        **extra,
    }


def model_of(http: httpx.Client) -> str:
    return http.get("/v1/models").json()["data"][0]["id"]


def metric(http: httpx.Client, name: str) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def wait_until(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def request_lines(server: ServerProcess, request_id: str) -> list[dict[str, Any]]:
    return [e for e in server.events() if e.get("request_id") == request_id]


def test_a_full_queue_answers_429_with_retry_after_and_an_openai_error(
    tight_http: httpx.Client,
) -> None:
    model = model_of(tight_http)
    rejected_before = metric(tight_http, 'draftwise_queue_rejections_total{reason="queue_full"}')
    queued: dict[str, httpx.Response] = {}
    with tight_http.stream("POST", "/v1/completions", json=body(model, stream=True)) as running:
        lines = running.iter_lines()  # kept: a dropped iterator closes the connection
        next(lines)  # generating now: the worker is busy
        waiter = threading.Thread(
            target=lambda: queued.update(r=tight_http.post("/v1/completions", json=body(model, 2)))
        )
        waiter.start()
        wait_until(lambda: tight_http.get("/health").json()["queue_depth"] == 1)
        assert metric(tight_http, "draftwise_queue_depth") == 1
        refused = tight_http.post("/v1/completions", json=body(model, 2))
    waiter.join(30)
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    error = refused.json()["error"]
    assert error["type"] == "rate_limit_error" and error["code"] == "queue_full"
    assert set(error) == {"message", "type", "param", "code"}
    assert queued["r"].status_code == 200  # the waiting request ran once the stream was gone
    after = metric(tight_http, 'draftwise_queue_rejections_total{reason="queue_full"}')
    assert after == rejected_before + 1
    assert "draftwise_queue_wait_seconds_count" in tight_http.get("/metrics").text


def test_a_client_leaving_mid_stream_frees_the_worker_within_a_round(
    tight: ServerProcess, tight_http: httpx.Client
) -> None:
    model = model_of(tight_http)
    with tight_http.stream("POST", "/v1/completions", json=body(model, stream=True)) as stream:
        lines = stream.iter_lines()
        first = json.loads(next(line for line in lines if line.startswith("data: "))[6:])
        next(lines)
    next_request = tight_http.post("/v1/completions", json=body(model, 2))
    assert next_request.status_code == 200
    wait_until(lambda: any(e.get("event") == "request" for e in request_lines(tight, first["id"])))
    stopped = [e for e in request_lines(tight, first["id"]) if e["event"] == "worker.stopped"]
    assert [e["reason"] for e in stopped] == ["cancelled"]
    # The request line is logged after the response is sent: wait for it, as for the first.
    next_id = next_request.json()["id"]
    wait_until(lambda: any(e.get("event") == "request" for e in request_lines(tight, next_id)))
    (line,) = [e for e in request_lines(tight, next_id) if e["event"] == "request"]
    assert line["queue_wait_ms"] < ONE_ROUND_S * 1000


def test_a_non_streaming_client_that_leaves_stops_its_generation(
    tight: ServerProcess, tight_http: httpx.Client
) -> None:
    model = model_of(tight_http)
    cancelled = 'draftwise_generations_stopped_total{reason="cancelled"}'
    before = metric(tight_http, cancelled)
    with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes the connection
        tight_http.post("/v1/completions", json=body(model), timeout=0.5)
    wait_until(lambda: metric(tight_http, cancelled) == before + 1, timeout=ONE_ROUND_S + 2)
    started = time.monotonic()
    assert tight_http.post("/v1/completions", json=body(model, 2)).status_code == 200
    assert time.monotonic() - started < 5.0
    assert not [e for e in tight.events() if e.get("event") == "request.unhandled"]


def test_a_body_over_the_limit_is_413_in_the_openai_envelope(tight_http: httpx.Client) -> None:
    model = model_of(tight_http)
    big = body(model, 2, prompt="x" * (BODY_LIMIT + 1))
    response = tight_http.post("/v1/completions", json=big)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert str(BODY_LIMIT) in response.json()["error"]["message"]


def test_a_chunked_body_over_the_limit_is_413_too(tight_http: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"model": "m", "prompt": "'
        for _ in range(BODY_LIMIT // 512 + 1):
            yield b"x" * 512
        yield b'"}'

    response = tight_http.post(
        "/v1/completions", content=chunks(), headers={"content-type": "application/json"}
    )
    assert "content-length" not in response.request.headers
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_a_settings_patch_over_the_limit_is_413_and_changes_nothing(
    tight_http: httpx.Client,
) -> None:
    before = tight_http.get("/v1/settings").json()
    patch = {"default_max_tokens": 3, "padding": "x" * BODY_LIMIT}
    assert tight_http.patch("/v1/settings", json=patch).status_code == 413
    assert tight_http.get("/v1/settings").json() == before


def test_n_and_choices_per_request_are_bounded(tight_http: httpx.Client) -> None:
    model = model_of(tight_http)
    too_many_n = tight_http.post("/v1/completions", json=body(model, 1, n=17))
    assert too_many_n.status_code == 400 and too_many_n.json()["error"]["param"] == "n"
    batch = body(model, 1, prompt=["a"] * 16, n=16)
    too_many = tight_http.post("/v1/completions", json=batch)
    assert too_many.status_code == 400 and too_many.json()["error"]["code"] == "too_many_choices"


def test_ignore_eos_runs_to_max_tokens_and_counts_eos_as_text(tight_http: httpx.Client) -> None:
    model = model_of(tight_http)
    only_eos = {"256": 100.0}  # the tiny model's EOS id: every step chooses it
    ended = tight_http.post(
        "/v1/completions", json=body(model, 5, ignore_eos=False, logit_bias=only_eos)
    )
    assert ended.json()["choices"][0]["finish_reason"] == "stop"
    assert ended.json()["usage"]["completion_tokens"] == 1
    kept = tight_http.post("/v1/completions", json=body(model, 5, logit_bias=only_eos)).json()
    assert kept["choices"][0]["finish_reason"] == "length"
    assert kept["usage"]["completion_tokens"] == 5
    assert kept["choices"][0]["text"] == "<|endoftext|>" * 5


def test_cors_answers_a_preflight_from_the_configured_origin_only(tight_http: httpx.Client) -> None:
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }
    allowed = tight_http.options("/v1/completions", headers={"Origin": ORIGIN, **preflight})
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == ORIGIN
    other = tight_http.options(
        "/v1/completions", headers={"Origin": "http://evil.example", **preflight}
    )
    assert "access-control-allow-origin" not in other.headers
    simple = tight_http.get("/v1/models", headers={"Origin": ORIGIN})
    assert simple.headers["access-control-allow-origin"] == ORIGIN


def test_cors_is_off_by_default(http: httpx.Client) -> None:
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
    assert (
        "access-control-allow-origin"
        not in http.options("/v1/completions", headers=preflight).headers
    )
    assert (
        "access-control-allow-origin"
        not in http.get("/v1/models", headers={"Origin": ORIGIN}).headers
    )


def test_health_reports_the_blas_in_use_at_top_level(tight_http: httpx.Client) -> None:
    health = tight_http.get("/health").json()
    assert health["blas"] and health["blas"] != "none loaded"


def test_the_openapi_schema_documents_the_real_error_statuses(tight_http: httpx.Client) -> None:
    paths = tight_http.get("/openapi.json").json()["paths"]
    completions = paths["/v1/completions"]["post"]["responses"]
    assert {"200", "400", "401", "404", "413", "429", "503"} <= set(completions)
    assert "Retry-After" in completions["429"]["headers"]
    assert {"400", "401", "409", "413"} <= set(paths["/v1/settings"]["patch"]["responses"])
    assert all("422" not in ops[m]["responses"] for ops in paths.values() for m in ops)
