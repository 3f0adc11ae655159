"""The server starts the way the container does and serves: entry point, image ENV, ConfigMap.

No container engine runs here, so the process gets what a pod gets: the image's ENTRYPOINT
and CMD, the image's ENV, the ConfigMap (envFrom) and the Deployment's literal env, in
Kubernetes' order. Only what must differ on a shared test machine is overridden: loopback
instead of 0.0.0.0, a free port instead of 8000, a temporary directory as the pod's
cache volume. No model volume: the embedded default pair, as in a pod without one.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.cpu_entry import CPU_WIDTH
from tests.deploy.deployfiles import DEPLOY, K8S_BASE, by_kind, final_stage, load_documents, tool

STARTUP_TIMEOUT_S = 300
# The documented way to change the width: add this to the ConfigMap, roll the Deployment.
WIDTH_EDIT = {"DRAFTWISE_DRAFT_BLOCK_SIZE": "4"}


@dataclass
class Server:
    process: subprocess.Popen[str]
    base_url: str
    env: dict[str, str]
    lines: list[str] = field(default_factory=list)

    def events(self) -> list[dict[str, Any]]:
        found = []
        for line in list(self.lines):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "event" in record:
                found.append(record)
        return found

    def event(self, name: str) -> dict[str, Any]:
        (record,) = [r for r in self.events() if r["event"] == name]
        return record


def pod_environment(configmap_edit: dict[str, str], port: int, cache_dir: Path) -> dict[str, str]:
    image = final_stage(DEPLOY / "Dockerfile")
    configmap = by_kind(load_documents(K8S_BASE / "configmap.yaml"), "ConfigMap")["data"]
    deployment = by_kind(load_documents(K8S_BASE / "deployment.yaml"), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    literal_env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    # This machine's own settings must not leak in; PATH stays the host's (the image's venv
    # path does not exist here; the entry point is resolved from this environment instead).
    ours = ("DRAFTWISE_", "LLAMA_", "MLXCEL_")
    host = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    return {
        **host,
        **{k: v for k, v in image.env.items() if k != "PATH"},
        **configmap,
        **configmap_edit,
        **literal_env,
        "DRAFTWISE_HOST": "127.0.0.1",
        "DRAFTWISE_PORT": str(port),
        "DRAFTWISE_CACHE_DIR": str(cache_dir),
    }


def entrypoint_command() -> list[str]:
    image = final_stage(DEPLOY / "Dockerfile")
    program, *args = image.entrypoint + image.cmd
    return [str(tool(program)), *args]


def wait_until_healthy(server: Server) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError("server exited during startup:\n" + "\n".join(server.lines))
        try:
            if httpx.get(server.base_url + "/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError("server not healthy in time:\n" + "\n".join(server.lines[-40:]))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for both starts, like a pod's cache on a PersistentVolumeClaim: the first
    start converts the default pair into it, the restart after the width edit reuses it."""
    return tmp_path_factory.mktemp("cache")


@contextmanager
def pod(configmap_edit: dict[str, str], cache_dir: Path) -> Iterator[Server]:
    """The container's process, healthy; stopped with SIGTERM (then SIGKILL) afterwards."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = pod_environment(configmap_edit, port, cache_dir)
    process = subprocess.Popen(
        entrypoint_command(),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    server = Server(process, f"http://127.0.0.1:{port}", env)
    output = process.stdout
    assert output is not None  # stdout=PIPE
    reader = threading.Thread(target=lambda: server.lines.extend(output), daemon=True)
    reader.start()
    try:
        wait_until_healthy(server)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join(timeout=5)


@pytest.fixture(scope="module", params=[{}, WIDTH_EDIT], ids=["configmap", "configmap+width"])
def server(request: pytest.FixtureRequest, cache_dir: Path) -> Iterator[Server]:
    with pod(request.param, cache_dir) as running:
        yield running


def expected_width(server: Server) -> tuple[int, str]:
    if "DRAFTWISE_DRAFT_BLOCK_SIZE" in server.env:
        return int(server.env["DRAFTWISE_DRAFT_BLOCK_SIZE"]), "env:DRAFTWISE_DRAFT_BLOCK_SIZE"
    return CPU_WIDTH, "policy"  # this CPU's measured entry: float32 target, OpenBLAS, dflash


def test_startup_logs_one_dflash_config_line_with_width_source_and_reason(server: Server) -> None:
    config = server.event("dflash.config")
    block_size, source = expected_width(server)
    assert config["block_size"] == block_size
    assert config["source"] == source
    assert isinstance(config["reason"], str) and config["reason"]


def test_health_and_the_images_healthcheck_pass_once_ready(server: Server) -> None:
    assert httpx.get(server.base_url + "/health", timeout=5).status_code == 200
    healthcheck = final_stage(DEPLOY / "Dockerfile").healthcheck
    command = [sys.executable, *healthcheck[1:]]
    result = subprocess.run(command, env=server.env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


def test_a_completion_comes_back_through_the_openai_sdk(server: Server) -> None:
    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused")
    (model,) = client.models.list().data
    completion = client.completions.create(
        model=model.id, prompt="The capital of France is", max_tokens=12, temperature=0
    )
    (choice,) = completion.choices
    # The embedded default target (SmolLM2-135M-Instruct) knows this one, greedily.
    assert "Paris" in choice.text
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 12 or choice.finish_reason == "stop"


def test_metrics_export_the_queue_depth_the_cuda_autoscaler_reads(server: Server) -> None:
    metrics = httpx.get(server.base_url + "/metrics", timeout=5).text
    assert any(line.startswith("draftwise_queue_depth ") for line in metrics.splitlines())


def test_sigterm_lets_an_inflight_request_finish_and_exits_within_the_grace_period(
    cache_dir: Path,
) -> None:
    deployment = by_kind(load_documents(K8S_BASE / "deployment.yaml"), "Deployment")
    grace_s = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    # The exactness probe plays no part in shutdown; off spares this start its ~40 s here.
    with pod({"DRAFTWISE_EXACTNESS": "off"}, cache_dir) as server:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused")
        (model,) = client.models.list().data
        stream = client.completions.create(
            model=model.id, prompt="Once upon a time", max_tokens=24, temperature=0, stream=True
        )
        chunks = iter(stream)
        first = next(chunks)
        # What the kubelet does when the pod is deleted or rolled.
        server.process.send_signal(signal.SIGTERM)
        rest = list(chunks)
        returncode = server.process.wait(timeout=grace_s)
    text = "".join(chunk.choices[0].text for chunk in [first, *rest] if chunk.choices)
    finish = [c.choices[0].finish_reason for c in rest if c.choices and c.choices[0].finish_reason]
    assert finish in (["length"], ["stop"])
    assert text
    # uvicorn re-raises the SIGTERM after its graceful shutdown, so -SIGTERM is a clean exit.
    assert returncode in (0, -signal.SIGTERM)
