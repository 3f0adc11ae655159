"""An 8-turn chat against several servers, timing each turn's first token.

    python -m server.tooling.chat_turns --out docs/benchmark_results/NAME

Arms (all up at once; each turn visits every arm, in an order that rotates per turn,
so load that comes and goes on a shared host hits them alike):
- draftwise with its prompt cache (the default),
- draftwise with `--prompt-cache-bytes 0`,
- mlx_lm.server with its own prompt cache (`--prompt-cache-bytes`), same target dir.

Each arm keeps its own history (its own answers go back in the next turn), greedy, and
the record says whether the arms' answers are identical. Time to first token is from
the request's start to the first streamed content delta.
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

USER_TURNS = (
    "I am planning a small vegetable garden behind my house. What should I grow first?",
    "The soil is quite sandy. Does that change your advice?",
    "How often should I water the tomatoes in summer?",
    "What about pests? I have seen small green insects on the leaves.",
    "Can I grow herbs next to the vegetables, or should they have their own bed?",
    "Which herbs are easiest for a beginner?",
    "Write a short weekly checklist for the garden.",
    "Thanks! Summarize our whole conversation in three sentences.",
)
ANSWER_TOKENS = 48


@dataclass
class Arm:
    name: str
    command: list[str]
    port: int
    process: subprocess.Popen[bytes] | None = None
    history: list[dict[str, str]] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def arms(target: str, logs: Path) -> list[Arm]:
    serve = [sys.executable, "-m", "server.cli", "serve", "--log-level", "warning"]
    mlx = [sys.executable, "-m", "mlx_lm.server", "--model", target, "--log-level", "WARNING"]
    made = []
    for name, command in (
        ("draftwise, prompt cache", serve),
        ("draftwise, no prompt cache", [*serve, "--prompt-cache-bytes", "0"]),
        ("mlx_lm.server, prompt cache", [*mlx, "--prompt-cache-bytes", str(2**30)]),
    ):
        port = free_port()
        made.append(Arm(name, [*command, "--port", str(port)], port))
    for arm in made:
        log = (logs / f"{arm.port}.log").open("wb")
        arm.process = subprocess.Popen(arm.command, stdout=log, stderr=subprocess.STDOUT)
    return made


def wait_ready(arm: Arm, timeout: float = 900.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{arm.url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"{arm.name} did not become ready")


def turn(arm: Arm, user: str) -> dict[str, Any]:
    """One streamed greedy turn: time to first content, text, usage."""
    arm.history.append({"role": "user", "content": user})
    body = {  # no "model": each server answers with the one it loaded
        "messages": arm.history,
        "max_tokens": ANSWER_TOKENS,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    first, text = None, ""
    usage: dict[str, Any] = {}
    with httpx.stream("POST", f"{arm.url}/v1/chat/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line.removeprefix("data: "))
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices", []):
                piece = choice.get("delta", {}).get("content") or ""
                if piece and first is None:
                    first = time.perf_counter() - start
                text += piece
    total = time.perf_counter() - start
    arm.history.append({"role": "assistant", "content": text})
    details = usage.get("prompt_tokens_details") or {}
    return {
        "ttft_s": round(first if first is not None else total, 4),
        "total_s": round(total, 4),
        "prompt_tokens": usage.get("prompt_tokens"),
        "cached_tokens": details.get("cached_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "text": text,
    }


def render(record: dict[str, Any]) -> str:
    names = [arm["name"] for arm in record["arms"]]
    lines = [
        f"# {record['name']}",
        "",
        f"{record['host']}; {record['when']}. {len(USER_TURNS)} turns, greedy, "
        f"{ANSWER_TOKENS} answer tokens, one conversation per arm, arms interleaved per "
        "turn (rotating order). TTFT: request start to the first content delta.",
        "",
        "| turn | prompt tokens | " + " | ".join(f"{n}: TTFT s (cached)" for n in names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for t in range(len(USER_TURNS)):
        cells = []
        for arm in record["arms"]:
            r = arm["turns"][t]
            cached = "" if r["cached_tokens"] is None else f" ({r['cached_tokens']})"
            cells.append(f"{r['ttft_s']:.3f}{cached}")
        prompt = record["arms"][0]["turns"][t]["prompt_tokens"]
        lines.append(f"| {t + 1} | {prompt} | " + " | ".join(cells) + " |")
    lines += ["", f"Answers identical across arms, every turn: {record['identical']}."]
    for key, value in record["summary"].items():
        lines.append(f"- {key}: {value}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="record path without suffix")
    parser.add_argument("--target", required=True, help="target dir for mlx_lm.server")
    args = parser.parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="draftwise-chat-turns-"))
    print(f"server logs in {logs}", flush=True)
    started = arms(args.target, logs)
    try:
        for arm in started:
            wait_ready(arm)
        for t, user in enumerate(USER_TURNS):
            order = started[t % len(started) :] + started[: t % len(started)]
            for arm in order:
                arm.turns.append(turn(arm, user))
                print(f"turn {t + 1} {arm.name}: ttft {arm.turns[-1]['ttft_s']} s", flush=True)
    finally:
        for arm in started:
            if arm.process is not None:
                arm.process.terminate()
                arm.process.wait(30)
    texts = [[r["text"] for r in arm.turns] for arm in started]
    cached, uncached = started[0].turns[-1]["ttft_s"], started[1].turns[-1]["ttft_s"]
    record = {
        "name": args.out.name,
        "host": f"{platform.node()} {platform.processor() or platform.machine()}",
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "arms": [{"name": a.name, "command": a.command[1:], "turns": a.turns} for a in started],
        "identical": all(t == texts[0] for t in texts),
        "summary": {
            "turn 8 TTFT, cached / uncached": f"{cached:.3f} / {uncached:.3f} s = "
            f"{cached / uncached:.0%} (goal: at most 25%)",
        },
    }
    args.out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(render(record))
    print(render(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
