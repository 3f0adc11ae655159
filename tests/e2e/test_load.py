"""A small bounded run of server/tooling/loadtest.py against the real server process."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from server.tooling.loadtest import LoadReport, run_load, stream_once, write_record
from tests.e2e.conftest import API_KEY
from tests.e2e.serverproc import ServerProcess


def load(
    server: ServerProcess,
    clients: int,
    requests: int,
    tokens: int,
    *prompts: str,
    chat: bool = False,
) -> LoadReport:
    """A bounded run of the load test against the real server."""
    return asyncio.run(
        run_load(server.base_url, clients, requests, 60, tokens, API_KEY, prompts, chat=chat)
    )


def test_concurrent_streaming_clients_all_complete_with_the_single_client_text(
    server: ServerProcess, tmp_path: Path
) -> None:
    report = load(server, 4, 12, 8, "ab", "def f(x):", "hello")
    assert report.ok, report.problems
    assert report.requests == 12
    assert set(report.counts_by_status) <= {"200", "429"}
    assert report.identity["all_identical"] and report.identity["checked"] >= 1
    assert report.latency_s["p50"] <= report.latency_s["p99"]
    json_path, md_path = write_record(report, tmp_path / "load-test", "test")
    assert json.loads(json_path.read_text())["counts_by_status"] == report.counts_by_status
    assert "Identity" in md_path.read_text()


def test_chat_clients_stream_the_same_text_a_single_chat_client_gets(
    server: ServerProcess,
) -> None:
    report = load(server, 3, 6, 6, "Say hi.", "Name a colour.", chat=True)
    assert report.ok, report.problems
    assert report.counts_by_status == {"200": 6}
    assert report.completed_tokens == 6 * 6  # each streamed its usage, every text compared
    assert report.identity["all_identical"] and report.identity["checked"] == 6
    # what a chat client streams is the chat answer, not a raw completion of the prompt
    model, streamed = asyncio.run(chat_stream(server, "Say hi."))
    body = {"model": model, "messages": [{"role": "user", "content": "Say hi."}]}
    answer = httpx.post(
        server.base_url + "/v1/chat/completions",
        json=body | {"max_tokens": 6, "temperature": 0, "ignore_eos": True},
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=60,
    ).json()
    assert streamed == answer["choices"][0]["message"]["content"]


async def chat_stream(server: ServerProcess, prompt: str) -> tuple[str, str]:
    """The served model's id and the text one streaming chat client gets for `prompt`."""
    headers = {"Authorization": f"Bearer {API_KEY}"}
    async with httpx.AsyncClient(base_url=server.base_url, headers=headers) as http:
        model = (await http.get("/v1/models")).json()["data"][0]["id"]
        outcome = await stream_once(http, model, (prompt,), 0, 6, chat=True)
    assert outcome.status == 200 and outcome.tokens == 6
    return model, outcome.text


def test_the_load_test_refuses_a_server_that_is_not_on_loopback() -> None:
    with pytest.raises(SystemExit, match="loopback"):
        asyncio.run(run_load("http://10.1.2.3:8080", 1, 1, 1.0, 1))
