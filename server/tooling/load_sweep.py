"""Concurrency sweep: the load test at several client counts against several servers.

Arms, all started once and kept up, on the same prompts (server/tooling/loadtest.py):

- `batched`: `draftwise serve` (the default pair) at --max-batch-size 8;
- `serial`: the same at --max-batch-size 1, one request at a time (the control);
- `mlx_lm`: `mlx_lm.server` on the same target with its own batching (no drafter:
  mlx_lm.server batches only without one), when `--mlx-lm` is given.

For each client count the arms run in turn, the order rotated per count, so
drift of the machine spreads over every arm. Each run is the bounded load test
(its references are the single-client outputs of that same server). The record
(`.json` and `.md`) holds every run's throughput, latency and status counts.

    python -m server.tooling.load_sweep --clients 1,2,4,8 --duration-s 40 \\
        --max-tokens 16 --mlx-lm --output docs/benchmark_results/cpu-batching-load
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from server.tooling.bench import (
    HOST,
    SERVE_ENTRY,
    Server,
    free_port,
    get_json,
    server_environment,
)
from server.tooling.loadtest import LoadReport, machine, run_load

READY_TIMEOUT_S = 600.0


def draftwise_command(port: int, batch: int, extra: Sequence[str]) -> list[str]:
    command = [sys.executable, "-c", SERVE_ENTRY, "serve", "--host", HOST, "--port", str(port)]
    return command + ["--max-batch-size", str(batch), *extra]


def mlx_lm_command(port: int, model: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mlx_lm",
        "server",
        "--model",
        model,
        "--host",
        HOST,
        "--port",
        str(port),
    ]


def served_model_path(port: int) -> str:
    _, settings = get_json(port, "/v1/settings", timeout_s=10)
    return settings["settings"]["model"]["value"]


def run_sweep(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    clients = [int(c) for c in args.clients.split(",")]
    # Every arm gets the BLAS `draftwise bench` gives its servers (OpenBLAS preloaded
    # where installed), so none re-executes and mlx_lm.server runs on the same BLAS.
    env = server_environment(os.environ, "auto")
    ports: dict[str, int] = {}
    servers: dict[str, Server] = {}
    for name, batch in (("batched", 8), ("serial", 1)):
        ports[name] = free_port()
        command = draftwise_command(ports[name], batch, args.server_arg)
        servers[name] = Server(command, env, ports[name], logs / f"{name}.log").__enter__()
    try:
        health = {name: server.wait_ready(READY_TIMEOUT_S) for name, server in servers.items()}
        # mlx_lm.server's /v1/models scans the Hugging Face cache (and fails without one):
        # requests name its model by its own --model path, the target draftwise serves.
        mlx_model = args.model_name or served_model_path(ports["batched"])
        if args.mlx_lm:
            ports["mlx_lm"] = free_port()
            command = mlx_lm_command(ports["mlx_lm"], mlx_model)
            servers["mlx_lm"] = Server(
                command, env, ports["mlx_lm"], logs / "mlx_lm.log"
            ).__enter__()
            health["mlx_lm"] = servers["mlx_lm"].wait_ready(READY_TIMEOUT_S)
        runs: list[dict[str, Any]] = []
        names = list(servers)
        for turn, count in enumerate(clients):
            order = names[turn % len(names) :] + names[: turn % len(names)]
            for name in order:
                url = f"http://{HOST}:{ports[name]}"
                print(f"[sweep] {name}: {count} clients", file=sys.stderr, flush=True)
                model = mlx_model if name == "mlx_lm" else None
                report: LoadReport = asyncio.run(
                    run_load(
                        url, count, args.requests, args.duration_s, args.max_tokens, model=model
                    )
                )
                runs.append({"arm": name, "clients": count, **asdict(report)})
    finally:
        for server in servers.values():
            server.stop()
    return {"servers": health, "runs": runs}


def markdown(record: dict[str, Any]) -> str:
    lines = [
        f"# Concurrency sweep: {record['name']}",
        "",
        f"Recorded {record['recorded']} with `server/tooling/load_sweep.py`.",
        "",
        f"    {record['command']}",
        "",
        f"- machine: {record['machine']['platform']}, {record['machine']['cpu_count']} CPUs,"
        f" load average {record['machine']['load_average_1m']} at the end",
        f"- {record['max_tokens']} tokens per request, greedy, streaming; `ignore_eos` where "
        "the server supports it (mlx_lm.server ignores it: its requests may end at EOS)",
        "- arms run in turn per client count, order rotated per count",
        "",
        "| clients | arm | tok/s | req/s | p50 / p99 latency s | p50 TTFT s | statuses "
        "| identical to single client | problems |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in record["runs"]:
        lat, ttft, ident = run["latency_s"], run["first_token_s"], run["identity"]
        statuses = ", ".join(f"{k}: {v}" for k, v in run["counts_by_status"].items())
        lines.append(
            f"| {run['clients']} | {run['arm']} | {run['tokens_per_second']} "
            f"| {run['requests_per_second']} | {lat.get('p50')} / {lat.get('p99')} "
            f"| {ttft.get('p50')} | {statuses} | {ident['identical']} of {ident['checked']} "
            f"| {'; '.join(run['problems']) or 'none'} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m server.tooling.load_sweep")
    parser.add_argument("--clients", default="1,2,4,8", help="comma-separated client counts")
    parser.add_argument("--duration-s", type=float, default=40.0, help="per run")
    parser.add_argument("--requests", type=int, default=10_000, help="per run, at most")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--mlx-lm", action="store_true", help="add the mlx_lm.server arm")
    parser.add_argument("--model-name", help="the model id to send mlx_lm.server")
    parser.add_argument("--server-arg", action="append", default=[], help="to draftwise serve")
    parser.add_argument("--output", type=Path, required=True, help="record path, no suffix")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    logs = args.output.parent / f".{args.output.name}-logs"
    logs.mkdir(exist_ok=True)
    result = run_sweep(args, logs)
    record = {
        "name": args.output.name,
        "recorded": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python -m server.tooling.load_sweep", *(argv or sys.argv[1:])]),
        "machine": machine(),
        "max_tokens": args.max_tokens,
        **result,
    }
    args.output.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    args.output.with_suffix(".md").write_text(markdown(record))
    print(f"wrote {args.output}.json and .md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
