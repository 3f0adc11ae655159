"""Concurrent requests share the batch and each still gets its solo output, classic and
speculative, with requests joining, leaving and one cancelled mid-flight."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from drafter.dflash import write_random_drafter
from tests.e2e.conftest import API_KEY, auth
from tests.e2e.serverproc import ServerProcess, clean_environ

# (prompt, max_tokens): different prompt lengths and different output lengths, so
# requests join and leave the batch at different steps.
REQUESTS = [
    ("a", 24),
    ("The quick brown fox jumps over the lazy dog", 9),
    ("hello world, " * 12, 30),
    ("0123456789", 15),
    ("lorem ipsum dolor sit amet", 21),
    ("x", 6),
    ("def fibonacci(n):\n    return", 27),
    ("Once upon a time, in a land far away, there lived", 12),
]


@pytest.fixture(scope="module")
def speculative_server(
    tiny_model: Path, model_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    drafter = write_random_drafter(model_cache / "batch-drafter", tiny_model, seed=4)
    process = ServerProcess.on_free_port(
        ["--model", str(tiny_model), "--draft-model", str(drafter)],
        clean_environ(DRAFTWISE_CACHE_DIR=str(model_cache), DRAFTWISE_API_KEY=API_KEY),
        tmp_path_factory.mktemp("batch-server") / "server.log",
        API_KEY,
    )
    with process.running() as ready:
        yield ready


def complete(client: openai.OpenAI, prompt: str, max_tokens: int) -> str:
    # model=None: the served model (the SDK's types want a name)
    response = client.completions.create(  # type: ignore[call-overload]
        model=None,
        prompt=prompt,
        max_tokens=max_tokens,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    return response.choices[0].text


def shared_steps(server: ServerProcess) -> float:
    """Decoding steps over more than one sequence so far (draftwise_batch_size)."""
    values = {}
    for line in httpx.get(f"{server.base_url}/metrics").text.splitlines():
        for name in ('draftwise_batch_size_bucket{le="1.0"}', "draftwise_batch_size_count"):
            if line.startswith(name + " "):
                values[name] = float(line.split()[-1])
    return values.get("draftwise_batch_size_count", 0.0) - values.get(
        'draftwise_batch_size_bucket{le="1.0"}', 0.0
    )


def pipelined_classic_steps(server: ServerProcess) -> float:
    """Classic steps whose forward the step before had queued (draftwise_batch_step_seconds)."""
    return sum(
        float(line.split()[-1])
        for line in httpx.get(f"{server.base_url}/metrics").text.splitlines()
        if line.startswith("draftwise_batch_step_seconds_count{")
        and 'pipelined="true"' in line
        and 'width="1"' in line
    )


def cancel_after_first_chunk(server: ServerProcess) -> None:
    """A streaming client that reads one event and hangs up."""
    body = {"prompt": "cancel me", "max_tokens": 200, "stream": True, "ignore_eos": True}
    http = httpx.Client(base_url=server.base_url, headers=auth(), timeout=30)
    with http, http.stream("POST", "/v1/completions", json=body) as response:
        next(response.iter_lines())


def cancellations(server: ServerProcess) -> int:
    return sum(
        1
        for event in server.events()
        if event.get("event") == "worker.stopped" and event.get("reason") == "cancelled"
    )


def wait_for_cancellations(server: ServerProcess, count: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while cancellations(server) < count:
        assert time.monotonic() < deadline, "the cancelled request was never stopped"
        time.sleep(0.1)


def run_concurrently(server: ServerProcess) -> tuple[list[str], list[str]]:
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=API_KEY, max_retries=0)
    alone = [complete(client, prompt, n) for prompt, n in REQUESTS]
    together: list[str] = [""] * len(REQUESTS)

    def one(i: int) -> None:
        time.sleep(0.05 * i)  # staggered: later requests join a running batch
        together[i] = complete(client, *REQUESTS[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(REQUESTS))]
    threads.append(threading.Thread(target=cancel_after_first_chunk, args=(server,)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return alone, together


def test_concurrent_classic_requests_each_get_their_solo_output(server: ServerProcess) -> None:
    before, cancelled = shared_steps(server), cancellations(server)
    pipelined = pipelined_classic_steps(server)
    alone, together = run_concurrently(server)
    assert together == alone
    assert shared_steps(server) > before, "no step decoded more than one sequence"
    assert pipelined_classic_steps(server) > pipelined, "no classic step was pipelined"
    wait_for_cancellations(server, cancelled + 1)


def test_concurrent_speculative_requests_each_get_their_solo_output(
    speculative_server: ServerProcess,
) -> None:
    health = httpx.get(f"{speculative_server.base_url}/health").json()
    assert health["speculative"]["speculative"] is True
    before, cancelled = shared_steps(speculative_server), cancellations(speculative_server)
    alone, together = run_concurrently(speculative_server)
    assert together == alone
    assert shared_steps(speculative_server) > before, "no step decoded more than one sequence"
    wait_for_cancellations(speculative_server, cancelled + 1)


def test_a_seeded_sampled_request_repeats_on_an_idle_speculative_server(
    speculative_server: ServerProcess,
) -> None:
    """temperature 0.8, n = 2, seed 7, three times: one answer, whatever widths the goodput
    control measured in between (its n choices batch with each other)."""
    body = {
        "messages": [{"role": "user", "content": "Tell me a story."}],
        "max_tokens": 24,
        "temperature": 0.8,
        "n": 2,
        "seed": 7,
        "ignore_eos": True,
    }
    url = f"{speculative_server.base_url}/v1/chat/completions"
    headers = {"Authorization": f"Bearer {API_KEY}"}
    answers = []
    for _ in range(3):
        response = httpx.post(url, json=body, headers=headers, timeout=60)
        assert response.status_code == 200, response.text
        answers.append([c["message"]["content"] for c in response.json()["choices"]])
    assert answers[0] == answers[1] == answers[2]
    assert answers[0][0] != answers[0][1]  # choice j samples with seed + j
