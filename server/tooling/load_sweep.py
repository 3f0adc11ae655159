"""Concurrency sweep: the load test at several client counts against several servers.

Arms, all started once and kept up, on the same prompts (server/tooling/loadtest.py).
Each `--arm NAME[@TREE]=ARGS` is `draftwise serve ARGS` (plus every `--server-arg`),
from another checkout's packages where TREE is given (an A/B of two commits); without
`--arm`:

- `batched`: `draftwise serve` (the default pair) at --max-batch-size 8;
- `serial`: the same at --max-batch-size 1, one request at a time (the control);

and `--mlx-lm` adds `mlx_lm.server` on the same target with its own batching (no
drafter: mlx_lm.server batches only without one).

For each client count, after `--warm-s` of discarded load on every arm, the arms run
`--passes` times in turn, the order rotated per pass, so drift of the machine spreads
over every arm. Each run is the bounded load test (its references are the
single-client outputs of that same server). The record (`.json` and `.md`) holds every
run's throughput, latency and status counts, the median and range per arm, and each
draftwise arm's `draftwise_batch*` metrics after each client count (the widths its
goodput control chose).

    python -m server.tooling.load_sweep --clients 1,2,4,8 --duration-s 40 \\
        --max-tokens 16 --mlx-lm --output docs/benchmark_results/cpu-batching-load
    python -m server.tooling.load_sweep --arm spec= --arm 'classic=--draft-model none' \\
        --clients 8,32 --passes 3 --warm-s 5 --duration-s 20 --max-tokens 128 \\
        --prompts-file my_prompts.json --output docs/benchmark_results/gpu-under-load
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import sys
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from server.tooling.bench import (
    HOST,
    SERVE_ENTRY,
    Server,
    free_port,
    get_json,
    read_prompts_file,
    server_environment,
)
from server.tooling.loadtest import PROMPTS, LoadReport, machine, run_load

READY_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Arm:
    name: str
    args: tuple[str, ...]
    tree: Path | None = None  # another checkout whose packages serve


DEFAULT_ARMS = (Arm("batched", ("--max-batch-size", "8")), Arm("serial", ("--max-batch-size", "1")))


def parse_arm(value: str) -> Arm:
    """`NAME[@TREE]=ARGS`: ARGS split as a shell would."""
    head, sep, args = value.partition("=")
    name, _, tree = head.partition("@")
    if not sep or not name or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"--arm {value!r}: expected NAME[@TREE]=ARGS")
    if tree and not (Path(tree) / "server" / "cli.py").is_file():
        raise argparse.ArgumentTypeError(f"--arm {value!r}: {tree} holds no server/cli.py")
    return Arm(name, tuple(shlex.split(args)), Path(tree).resolve() if tree else None)


def draftwise_command(port: int, arm: Arm, extra: Sequence[str]) -> list[str]:
    command = [sys.executable, "-c", SERVE_ENTRY, "serve", "--host", HOST, "--port", str(port)]
    return command + [*arm.args, *extra]


def arm_environment(env: dict[str, str], arm: Arm) -> dict[str, str]:
    """The tree's packages first on the path, where the arm names one (its server also
    runs in the tree: `python -c` looks in the working directory before the path)."""
    if arm.tree is None:
        return env
    path = [str(arm.tree), env.get("PYTHONPATH", "")]
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in path if p)}


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


def batch_metrics(port: int) -> list[str]:
    """The server's `draftwise_batch*` samples (no histogram buckets)."""
    with urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return [
        line
        for line in text.splitlines()
        if line.startswith("draftwise_batch") and "_bucket" not in line
    ]


def run_sweep(args: argparse.Namespace, logs: Path, save: Callable[[dict[str, Any]], None]) -> None:
    """Every run at every client count; `save` gets the result so far after each run,
    so a sweep cut short (a time limit) keeps what it measured."""
    clients = [int(c) for c in args.clients.split(",")]
    prompts = args.prompts_file.prompts if args.prompts_file else PROMPTS
    # Every arm gets the BLAS `draftwise bench` gives its servers (OpenBLAS preloaded
    # where installed), so none re-executes and mlx_lm.server runs on the same BLAS.
    env = server_environment(os.environ, "auto")
    ports: dict[str, int] = {}
    servers: dict[str, Server] = {}
    for arm in args.arm or DEFAULT_ARMS:
        ports[arm.name] = free_port()
        command = draftwise_command(ports[arm.name], arm, args.server_arg)
        log = logs / f"{arm.name}.log"
        servers[arm.name] = Server(
            command, arm_environment(env, arm), ports[arm.name], log, cwd=arm.tree
        )
        servers[arm.name].__enter__()
    draftwise = list(servers)
    try:
        health = {name: server.wait_ready(READY_TIMEOUT_S) for name, server in servers.items()}
        # mlx_lm.server's /v1/models scans the Hugging Face cache (and fails without one):
        # requests name its model by its own --model path, the target draftwise serves.
        mlx_model = args.model_name or served_model_path(ports[draftwise[0]])
        if args.mlx_lm:
            ports["mlx_lm"] = free_port()
            command = mlx_lm_command(ports["mlx_lm"], mlx_model)
            servers["mlx_lm"] = Server(
                command, env, ports["mlx_lm"], logs / "mlx_lm.log"
            ).__enter__()
            health["mlx_lm"] = servers["mlx_lm"].wait_ready(READY_TIMEOUT_S)
        runs: list[dict[str, Any]] = []
        metrics: dict[str, dict[str, list[str]]] = {}
        arms = {
            arm.name: {"args": list(arm.args), "tree": arm.tree and str(arm.tree)}
            for arm in args.arm or DEFAULT_ARMS
        }
        result = {
            "arms": arms,
            "prompts": list(prompts),
            "servers": health,
            "runs": runs,
            "batch_metrics": metrics,
        }
        names = list(servers)
        turn = 0

        def load(name: str, count: int, duration_s: float) -> LoadReport:
            model = mlx_model if name == "mlx_lm" else None
            url = f"http://{HOST}:{ports[name]}"
            return asyncio.run(
                run_load(
                    url,
                    count,
                    args.requests,
                    duration_s,
                    args.max_tokens,
                    prompts=prompts,
                    model=model,
                    chat=args.chat,
                )
            )

        for count in clients:
            if args.warm_s > 0:
                for name in names:
                    load(name, count, args.warm_s)
            for n in range(args.passes):
                order = names[turn % len(names) :] + names[: turn % len(names)]
                turn += 1
                for name in order:
                    print(f"[sweep] {name}: {count} clients, pass {n}", file=sys.stderr, flush=True)
                    report = load(name, count, args.duration_s)
                    runs.append({"arm": name, "clients": count, "pass": n, **asdict(report)})
                    save(result)
            metrics[str(count)] = {name: batch_metrics(ports[name]) for name in draftwise}
            save(result)
    finally:
        for server in servers.values():
            server.stop()


def summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per client count and arm: every pass's tok/s, their median and range."""
    rows: dict[tuple[int, str], list[float]] = {}
    for run in runs:
        rows.setdefault((run["clients"], run["arm"]), []).append(run["tokens_per_second"])
    return [
        {
            "clients": clients,
            "arm": arm,
            "tok_s": values,
            "median": round(statistics.median(values), 2),
            "range": [min(values), max(values)],
        }
        for (clients, arm), values in rows.items()
    ]


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
        f"- {record['max_tokens']} tokens per request, greedy, streaming, "
        + (
            "chat completions (the prompt as one user message)"
            if record.get("chat")
            else "completions of the raw prompt"
        )
        + "; `ignore_eos` where "
        "the server supports it (mlx_lm.server ignores it: its requests may end at EOS)",
        "- arms run in turn, order rotated per pass; arms: "
        + "; ".join(
            f"`{name}`: {shlex.join(arm['args']) or '(no flags)'}"
            + (f" from {arm['tree']}" if arm["tree"] else "")
            for name, arm in record["arms"].items()
        ),
        "",
        "| clients | arm | tok/s per pass | median | range |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in summary(record["runs"]):
        passes = ", ".join(str(v) for v in row["tok_s"])
        low, high = row["range"]
        lines.append(
            f"| {row['clients']} | {row['arm']} | {passes} | {row['median']} | {low}-{high} |"
        )
    lines += [
        "",
        "| clients | arm | pass | tok/s | req/s | p50 / p99 latency s | p50 TTFT s | statuses "
        "| identical to single client | problems |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in record["runs"]:
        lat, ttft, ident = run["latency_s"], run["first_token_s"], run["identity"]
        statuses = ", ".join(f"{k}: {v}" for k, v in run["counts_by_status"].items())
        lines.append(
            f"| {run['clients']} | {run['arm']} | {run['pass']} | {run['tokens_per_second']} "
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
    parser.add_argument(
        "--arm",
        type=parse_arm,
        action="append",
        default=[],
        metavar="NAME[@TREE]=ARGS",
        help="a draftwise server: its serve flags, from TREE's packages if given (repeatable;"
        " default: batched and serial)",
    )
    parser.add_argument("--passes", type=int, default=1, help="runs per arm and client count")
    parser.add_argument("--warm-s", type=float, default=0.0, help="discarded load first, per arm")
    parser.add_argument("--prompts-file", type=read_prompts_file, metavar="JSON")
    parser.add_argument(
        "--chat", action="store_true", help="chat completions, each prompt one user message"
    )
    parser.add_argument("--mlx-lm", action="store_true", help="add the mlx_lm.server arm")
    parser.add_argument("--model-name", help="the model id to send mlx_lm.server")
    parser.add_argument("--server-arg", action="append", default=[], help="to draftwise serve")
    parser.add_argument("--output", type=Path, required=True, help="record path, no suffix")
    args = parser.parse_args(argv)
    names = [arm.name for arm in args.arm] + (["mlx_lm"] if args.mlx_lm else [])
    if twice := sorted({name for name in names if names.count(name) > 1}):
        parser.error(f"--arm: each arm needs its own name ({', '.join(twice)} given twice)")
    if args.passes < 1:
        parser.error("--passes: at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    logs = args.output.parent / f".{args.output.name}-logs"
    logs.mkdir(exist_ok=True)
    command = shlex.join(["python", "-m", "server.tooling.load_sweep", *(argv or sys.argv[1:])])

    def save(result: dict[str, Any]) -> None:
        record = {
            "name": args.output.name,
            "recorded": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "command": command,
            "machine": machine(),
            "max_tokens": args.max_tokens,
            "chat": args.chat,
            **result,
        }
        args.output.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
        args.output.with_suffix(".md").write_text(markdown(record))

    run_sweep(args, logs, save)
    print(f"wrote {args.output}.json and .md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
