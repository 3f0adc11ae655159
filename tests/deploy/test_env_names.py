"""Every environment variable deploy/ sets or shows is one the server reads: a typo fails."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from server.settings import known_env_vars
from tests.deploy.deployfiles import DEPLOY, DOCKERFILES, ROOT, final_stage

# Names of the server's kind: settings, llama.cpp-style aliases, width overrides.
SERVER_NAME = re.compile(r"\b(?:DRAFTWISE|LLAMA|MLXCEL)_[A-Z0-9_]*[A-Z0-9]\b")
# Set in the Deployment for libraries, not for draftwise: MKL and OpenBLAS read them.
LIBRARY_VARS = {"MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"}
WIDTH_OVERRIDES = {
    "DRAFTWISE_DRAFT_BLOCK_SIZE",
    "LLAMA_ARG_DRAFT_BLOCK_SIZE",
    "MLXCEL_DRAFT_BLOCK_SIZE",
}
SHIPPED_TEXTS = sorted(
    {*(p for p in DEPLOY.rglob("*") if p.is_file()), ROOT / "docs" / "deploy.md"}
)


def unknown(names: set[str]) -> set[str]:
    return names - known_env_vars()


def compose_environment(compose: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for service in compose["services"].values():
        environment = service.get("environment", {})
        if isinstance(environment, list):
            names |= {entry.split("=", 1)[0] for entry in environment}
        else:
            names |= set(environment)
    return names


def test_the_server_publishes_the_names_it_reads() -> None:
    assert {"DRAFTWISE_MODEL", "LLAMA_ARG_PORT", *WIDTH_OVERRIDES} <= known_env_vars()
    assert "DRAFTWISE_MODLE" not in known_env_vars()


def test_every_variable_the_configmap_sets_is_read_by_the_server(configmap: dict[str, str]) -> None:
    assert "DRAFTWISE_EXACTNESS" in configmap
    assert unknown(set(configmap)) == set()


def test_every_variable_compose_sets_is_read_by_the_server(compose: dict[str, Any]) -> None:
    names = compose_environment(compose)
    assert "DRAFTWISE_EXACTNESS" in names
    assert unknown(names) == set()


def test_every_variable_the_deployment_sets_is_read_by_the_server_or_a_library(
    deployment: dict[str, Any],
) -> None:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    names = {entry["name"] for entry in container["env"]}
    assert "DRAFTWISE_API_KEY" in names
    assert unknown(names - LIBRARY_VARS) == set()


@pytest.mark.parametrize("name", DOCKERFILES)
def test_every_server_variable_the_image_sets_is_read_by_the_server(name: str) -> None:
    names = {key for key in final_stage(DEPLOY / name).env if SERVER_NAME.fullmatch(key)}
    assert {"DRAFTWISE_HOST", "DRAFTWISE_PORT", "DRAFTWISE_CACHE_DIR"} <= names
    assert unknown(names) == set()


@pytest.mark.parametrize("path", SHIPPED_TEXTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_server_variable_named_anywhere_is_real_commented_examples_included(
    path: Path,
) -> None:
    # Commented-out lines are what operators uncomment, so they are checked too.
    assert unknown(set(SERVER_NAME.findall(path.read_text()))) == set()


@pytest.mark.parametrize("path", ["compose.yaml", "k8s/base/configmap.yaml"])
def test_compose_and_configmap_show_all_three_width_overrides(path: str) -> None:
    assert set(SERVER_NAME.findall((DEPLOY / path).read_text())) >= WIDTH_OVERRIDES


def test_the_name_scan_catches_a_typo() -> None:
    assert unknown(set(SERVER_NAME.findall("# DRAFTWISE_DRAFT_BLOK_SIZE: 4"))) == {
        "DRAFTWISE_DRAFT_BLOK_SIZE"
    }
