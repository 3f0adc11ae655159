"""SIGTERM drains: no new requests (503), /health says draining, in-flight requests
finish (or are cut at the grace period), and the process exits 0 after logging
server.stopped."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.serverproc import ServerProcess, clean_environ


def start(tiny_model: Path, tmp_path: Path, grace_s: float) -> ServerProcess:
    args = ["--model", str(tiny_model), "--shutdown-grace-s", str(grace_s)]
    server = ServerProcess.on_free_port(args, clean_environ(), tmp_path / "server.log")
    return server.start().wait_ready()


def stream_body(http: httpx.Client, max_tokens: int) -> dict[str, object]:
    model = http.get("/v1/models").json()["data"][0]["id"]
    return {
        "model": model,
        "prompt": "ab",
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def payloads(lines: list[str]) -> list[Any]:
    return [
        json.loads(x[6:]) if x != "data: [DONE]" else "[DONE]"
        for x in lines
        if x.startswith("data: ")
    ]


def test_sigterm_finishes_the_inflight_stream_refuses_new_work_and_exits_0(
    tiny_model: Path, tmp_path: Path
) -> None:
    server = start(tiny_model, tmp_path, grace_s=60)
    assert server.process is not None
    with httpx.Client(base_url=server.base_url, timeout=60) as http:
        body = stream_body(http, max_tokens=300)
        with http.stream("POST", "/v1/completions", json=body) as stream:
            lines = stream.iter_lines()
            received = [next(lines)]
            server.process.send_signal(signal.SIGTERM)
            server.wait_for_event("server.draining")
            health = http.get("/health")
            refused = http.post(
                "/v1/completions", json={**body, "stream": False, "stream_options": None}
            )
            received += list(lines)
    assert health.status_code == 503 and health.json()["status"] == "draining"
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "shutting_down" and refused.headers["retry-after"]
    *chunks, usage, done = payloads(received)
    assert done == "[DONE]"
    assert usage["usage"]["completion_tokens"] == 300
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert server.process.wait(timeout=30) == 0
    events = [e["event"] for e in server.events()]
    assert (
        events.index("server.draining")
        < events.index("server.drained")
        < events.index("server.stopped")
    )


def test_a_request_still_running_at_the_end_of_the_grace_period_is_cut_and_the_exit_is_0(
    tiny_model: Path, tmp_path: Path
) -> None:
    server = start(tiny_model, tmp_path, grace_s=0.5)
    assert server.process is not None
    with httpx.Client(base_url=server.base_url, timeout=60) as http:
        body = stream_body(http, 2000)
    with httpx.stream("POST", f"{server.base_url}/v1/completions", json=body, timeout=60) as stream:
        lines = stream.iter_lines()
        received = [next(lines)]
        server.process.send_signal(signal.SIGTERM)
        received += list(lines)
    *_, error, done = payloads(received)
    assert done == "[DONE]"
    assert error["error"]["code"] == "shutting_down"
    assert server.process.wait(timeout=30) == 0
    events = [e["event"] for e in server.events()]
    assert "server.grace_expired" in events and events[-1] == "server.stopped"


def test_sigterm_on_an_idle_server_exits_0_at_once(tiny_model: Path, tmp_path: Path) -> None:
    server = start(tiny_model, tmp_path, grace_s=60)
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=10) == 0
    assert server.events()[-1]["event"] == "server.stopped"
