"""A bounded load test of a running draftwise server (loopback only).

N concurrent streaming clients send greedy completions, or with `--chat` chat
completions of the prompt as one user message (EOS ignored, so every completed
request has the same length) until a request count or a time limit
is reached. Every answer must be a completed stream or a 429; every completed
text must equal what a single client got for the same prompt first. The run is
written as a record (`.json` and `.md`) under docs/benchmark_results/.

    python -m server.tooling.loadtest --url http://127.0.0.1:8080 --clients 8 --requests 64 \\
        --duration-s 240 --max-tokens 32 --output docs/benchmark_results/load-myhost
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx

PROMPTS = (
    "def fibonacci(n):",
    "The capital of France is",
    "Once upon a time, in a small village,",
    "import numpy as np\n\ndef softmax(x):",
    "Q: What is 12 times 7?\nA:",
    "The three primary colors are",
)
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
MAX_REQUESTS = 10_000
MAX_DURATION_S = 1800.0
MAX_CLIENTS = 256


@dataclass
class Outcome:
    prompt: int
    status: int  # HTTP status; 200 with an error event counts as the error's status
    latency_s: float
    first_token_s: float | None = None
    tokens: int = 0
    text: str = ""
    error: str | None = None
    retry_after_s: float | None = None


@dataclass
class LoadReport:
    url: str
    machine: dict[str, Any]
    server: dict[str, Any]
    clients: int
    max_tokens: int
    requests: int
    duration_s: float
    counts_by_status: dict[str, int]
    latency_s: dict[str, float]
    first_token_s: dict[str, float]
    completed_tokens: int
    tokens_per_second: float
    requests_per_second: float
    identity: dict[str, Any]
    ok: bool
    problems: list[str] = field(default_factory=list)


def require_loopback(url: str) -> None:
    host = urlparse(url).hostname or ""
    if host not in LOOPBACK:
        raise SystemExit(f"error: the load test only targets loopback servers, not {host!r}")


def completion_body(model: str, prompt: str, max_tokens: int, chat: bool) -> dict[str, Any]:
    text = {"messages": [{"role": "user", "content": prompt}]} if chat else {"prompt": prompt}
    return {
        "model": model,
        **text,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def stream_once(
    http: httpx.AsyncClient,
    model: str,
    prompts: Sequence[str],
    index: int,
    max_tokens: int,
    chat: bool = False,
) -> Outcome:
    started = time.perf_counter()
    body = completion_body(model, prompts[index], max_tokens, chat)
    outcome = Outcome(prompt=index, status=0, latency_s=0.0)
    path = "/v1/chat/completions" if chat else "/v1/completions"
    try:
        async with http.stream("POST", path, json=body) as response:
            outcome.status = response.status_code
            if response.status_code != 200:
                await response.aread()
                outcome.error = response.text[:200]
                retry_after = response.headers.get("retry-after", "")
                outcome.retry_after_s = float(retry_after) if retry_after.isdigit() else None
            else:
                await read_events(response, outcome, started)
    except httpx.HTTPError as error:
        outcome.status, outcome.error = 0, f"{type(error).__name__}: {error}"
    outcome.latency_s = time.perf_counter() - started
    return outcome


async def read_events(response: httpx.Response, outcome: Outcome, started: float) -> None:
    async for line in response.aiter_lines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        payload = json.loads(line[6:])
        if "error" in payload:
            outcome.status = 499 if payload["error"].get("code") == "cancelled" else 500
            outcome.error = payload["error"]["message"]
        for choice in payload.get("choices") or []:
            text = choice["delta"].get("content") or "" if "delta" in choice else choice["text"]
            if text and outcome.first_token_s is None:
                outcome.first_token_s = time.perf_counter() - started
            outcome.text += text
        if payload.get("usage"):
            outcome.tokens = payload["usage"]["completion_tokens"]


async def reference_texts(
    http: httpx.AsyncClient, model: str, prompts: Sequence[str], max_tokens: int, chat: bool
) -> list[str]:
    texts = []
    for index in range(len(prompts)):
        outcome = await stream_once(http, model, prompts, index, max_tokens, chat)
        if outcome.status != 200:
            raise SystemExit(f"error: the reference request failed: {outcome.error}")
        texts.append(outcome.text)
    return texts


async def run_clients(
    http: httpx.AsyncClient,
    model: str,
    prompts: Sequence[str],
    clients: int,
    requests: int,
    duration_s: float,
    max_tokens: int,
    chat: bool,
) -> tuple[list[Outcome], float]:
    issued = 0
    outcomes: list[Outcome] = []
    started = time.perf_counter()
    deadline = started + duration_s

    async def client() -> None:
        nonlocal issued
        while issued < requests and time.perf_counter() < deadline:
            index = issued % len(prompts)
            issued += 1
            outcome = await stream_once(http, model, prompts, index, max_tokens, chat)
            outcomes.append(outcome)
            if outcome.status == 429:  # back off as asked, as a polite client would
                await asyncio.sleep(min(outcome.retry_after_s or 1.0, 10.0))

    await asyncio.gather(*(client() for _ in range(clients)))
    return outcomes, time.perf_counter() - started


def percentiles(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4)

    return {
        "p50": at(0.50),
        "p90": at(0.90),
        "p99": at(0.99),
        "max": round(ordered[-1], 4),
        "mean": round(statistics.fmean(ordered), 4),
    }


def machine() -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def summarize(
    url: str,
    server: dict[str, Any],
    outcomes: list[Outcome],
    wall_s: float,
    references: list[str],
    clients: int,
    max_tokens: int,
) -> LoadReport:
    counts = Counter(str(o.status) for o in outcomes)
    completed = [o for o in outcomes if o.status == 200]
    mismatched = [o for o in completed if o.text != references[o.prompt]]
    short = [o for o in completed if o.tokens != max_tokens]
    problems = []
    if any(o.status >= 500 or o.status == 0 for o in outcomes):
        problems.append("5xx or transport errors")
    if any(o.status not in (200, 429) for o in outcomes):
        problems.append("answers other than 200 or 429")
    if mismatched:
        problems.append(f"{len(mismatched)} completed outputs differ from the reference")
    if short:
        problems.append(f"{len(short)} completed outputs are not {max_tokens} tokens")
    tokens = sum(o.tokens for o in completed)
    host = machine()
    host["load_average_1m_at_start"] = server.pop("load_average_1m_at_start", None)
    return LoadReport(
        url=url,
        machine=host,
        server=server,
        clients=clients,
        max_tokens=max_tokens,
        requests=len(outcomes),
        duration_s=round(wall_s, 2),
        counts_by_status=dict(sorted(counts.items())),
        latency_s=percentiles([o.latency_s for o in completed]),
        first_token_s=percentiles([o.first_token_s for o in completed if o.first_token_s]),
        completed_tokens=tokens,
        tokens_per_second=round(tokens / wall_s, 2) if wall_s else 0.0,
        requests_per_second=round(len(completed) / wall_s, 3) if wall_s else 0.0,
        identity={
            "checked": len(completed),
            "identical": len(completed) - len(mismatched),
            "all_identical": not mismatched,
            "reference": "the same prompt from a single client before the load",
        },
        ok=not problems,
        problems=problems,
    )


async def run_load(
    url: str,
    clients: int,
    requests: int,
    duration_s: float,
    max_tokens: int,
    api_key: str | None = None,
    prompts: Sequence[str] = PROMPTS,
    model: str | None = None,
    chat: bool = False,
) -> LoadReport:
    require_loopback(url)
    clients = min(clients, MAX_CLIENTS)
    requests = min(requests, MAX_REQUESTS)
    duration_s = min(duration_s, MAX_DURATION_S)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=clients + 4)
    load_at_start = round(os.getloadavg()[0], 2)
    async with httpx.AsyncClient(
        base_url=url, headers=headers, timeout=httpx.Timeout(600.0, connect=10.0), limits=limits
    ) as http:
        answer = await http.get("/health")
        # another server (mlx_lm.server) may answer /health without JSON: fields unknown
        json_health = answer.headers.get("content-type", "").startswith("application/json")
        health = answer.json() if answer.status_code == 200 and json_health else {}
        if model is None:
            model = (await http.get("/v1/models")).json()["data"][0]["id"]
        references = await reference_texts(http, model, prompts, max_tokens, chat)
        outcomes, wall_s = await run_clients(
            http, model, prompts, clients, requests, duration_s, max_tokens, chat
        )
    server = {k: health.get(k) for k in ("model", "backend", "blas", "context_length")}
    server["load_average_1m_at_start"] = load_at_start
    spec = health.get("speculative") or {}
    server["speculative"] = {k: spec.get(k) for k in ("speculative", "block_size", "drafter")}
    return summarize(url, server, outcomes, wall_s, references, clients, max_tokens)


def write_record(report: LoadReport, output: Path, command: str) -> tuple[Path, Path]:
    output.parent.mkdir(parents=True, exist_ok=True)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    data = {"recorded": when, "command": command, **asdict(report)}
    json_path = output.with_suffix(".json")
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    md_path = output.with_suffix(".md")
    md_path.write_text(markdown(report, when, command))
    return json_path, md_path


def markdown(r: LoadReport, when: str, command: str) -> str:
    m, s = r.machine, r.server
    rows = "\n".join(f"| {status} | {count} |" for status, count in r.counts_by_status.items())

    def pct(values: dict[str, float]) -> str:
        return " / ".join(
            f"{values.get(k, float('nan')):.3f}" for k in ("p50", "p90", "p99", "max")
        )

    identity = r.identity
    verdict = "pass" if r.ok else "FAIL (" + "; ".join(r.problems) + ")"
    model = f"`{s.get('model')}` on {s.get('backend')} (BLAS: {s.get('blas')})"
    same = f"{identity['identical']} of {identity['checked']}"
    return f"""# Load test: {m["host"]}

Recorded {when} with `server/tooling/loadtest.py` (loopback, bounded). Verdict: **{verdict}**.

    {command}

## Machine and server

- machine: {m["platform"]}, {m["processor"]}, {m["cpu_count"]} CPUs, Python {m["python"]}
- 1-minute load average: {m["load_average_1m_at_start"]} at start, {m["load_average_1m"]} at end
  (other work on the machine shares its cores)
- model: {model}, context {s.get("context_length")}
- speculative: {s.get("speculative")}

## Load

- {r.clients} concurrent streaming clients, greedy, `ignore_eos`, {r.max_tokens} tokens per request;
  a client answered 429 waits `Retry-After` seconds, then sends its next request
- {r.requests} requests in {r.duration_s} s

| status | count |
| --- | --- |
{rows}

| seconds (completed requests) | p50 / p90 / p99 / max |
| --- | --- |
| latency (request to last byte) | {pct(r.latency_s)} |
| time to first token | {pct(r.first_token_s)} |

Throughput: {r.tokens_per_second} generated tokens/s, {r.requests_per_second} completed requests/s
(all clients together; the server runs one request at a time on one model worker).

## Identity

{same} completed outputs are byte-identical to {identity["reference"]}
(all identical: {identity["all_identical"]}).
"""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m server.tooling.loadtest", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="a loopback server")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=64, help=f"total, at most {MAX_REQUESTS}")
    parser.add_argument("--duration-s", type=float, default=240.0, help="stop issuing after this")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument(
        "--chat", action="store_true", help="chat completions, each prompt one user message"
    )
    parser.add_argument("--api-key", default=os.environ.get("DRAFTWISE_API_KEY"))
    parser.add_argument("--output", type=Path, help="record path without suffix (.json and .md)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    report = asyncio.run(
        run_load(
            args.url,
            args.clients,
            args.requests,
            args.duration_s,
            args.max_tokens,
            args.api_key,
            chat=args.chat,
        )
    )
    command = "python -m server.tooling.loadtest " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:]) if a != args.api_key
    )
    print(json.dumps(asdict(report), indent=2))
    if args.output is not None:
        for path in write_record(report, args.output, command):
            print(f"wrote {path}", file=sys.stderr)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
