"""Fixtures: the shipped ConfigMap, Deployment, compose file and CPU image, parsed."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import yaml

from tests.deploy.deployfiles import DEPLOY, K8S_BASE, Stage, by_kind, final_stage, load_documents


@pytest.fixture(scope="session")
def configmap() -> dict[str, str]:
    return by_kind(load_documents(K8S_BASE / "configmap.yaml"), "ConfigMap")["data"]


@pytest.fixture(scope="session")
def deployment() -> dict[str, Any]:
    return by_kind(load_documents(K8S_BASE / "deployment.yaml"), "Deployment")


@pytest.fixture(scope="session")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


@pytest.fixture(scope="session")
def cpu_image() -> Stage:
    return final_stage(DEPLOY / "Dockerfile")


@pytest.fixture
def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
