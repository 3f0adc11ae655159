"""The real `draftwise serve` as a child process, on a free port, with its log captured."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
SERVER_ENV_PREFIXES = ("DRAFTWISE_", "LLAMA_", "MLXCEL_")
ISOLATED_CACHE = Path(tempfile.mkdtemp(prefix="draftwise-e2e-cache-"))
atexit.register(shutil.rmtree, ISOLATED_CACHE, ignore_errors=True)
START_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clean_environ(**extra: str) -> dict[str, str]:
    """This process's environment without any server setting, plus `extra`; the cache
    directory is a fresh one, so nothing a developer calibrated or cached leaks in."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(SERVER_ENV_PREFIXES)}
    return {**env, "DRAFTWISE_CACHE_DIR": str(ISOLATED_CACHE), **extra}


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "server.cli", "serve", *args]


@dataclass
class ServerProcess:
    args: list[str]
    env: dict[str, str]
    log_path: Path
    port: int
    api_key: str | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @classmethod
    def on_free_port(
        cls, args: list[str], env: dict[str, str], log_path: Path, api_key: str | None = None
    ) -> ServerProcess:
        """A server for `draftwise serve ARGS` on a port nothing else listens on."""
        port = free_port()
        return cls([*args, "--port", str(port)], env, log_path, port, api_key)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerProcess:
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                command(*self.args),
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        return self

    @contextmanager
    def running(self) -> Iterator[ServerProcess]:
        """Started and ready inside the block; stopped after it, whatever happened."""
        self.start()
        try:
            yield self.wait_ready()
        finally:
            self.stop()

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> ServerProcess:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.base_url}/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"server not ready after {timeout}s:\n{self.log()}")

    def wait_for_event(self, event: str, timeout: float = START_TIMEOUT_S) -> dict[str, Any]:
        """The first JSON log line with this event name."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [e for e in self.events() if e.get("event") == event]
            if found:
                return found[0]
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited {self.process.returncode}:\n{self.log()}")
            time.sleep(0.1)
        raise TimeoutError(f"no {event} event after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def events(self) -> list[dict[str, Any]]:
        events = []
        for line in self.log().splitlines():
            if line.startswith("{"):
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return events

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def run_to_exit(args: list[str], env: dict[str, str], timeout: float = 60.0) -> tuple[int, str]:
    """Run a server that is expected to stop by itself; (exit code, stderr)."""
    done = subprocess.run(
        command(*args), cwd=ROOT, env=env, capture_output=True, timeout=timeout, text=True
    )
    return done.returncode, done.stderr
