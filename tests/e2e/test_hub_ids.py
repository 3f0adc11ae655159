"""`--model org/name` resolved from a Hugging Face cache laid out on disk, offline."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

from tests.e2e.serverproc import ServerProcess, clean_environ, run_to_exit

REPO = "draftwise-test/tiny"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def hf_home(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """HF_HOME with the tiny model cached as REPO at COMMIT, as huggingface_hub lays it out."""
    home = tmp_path_factory.mktemp("hf-home")
    repo = home / "hub" / ("models--" + REPO.replace("/", "--"))
    shutil.copytree(tiny_model, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return home


def test_a_model_id_is_served_from_the_offline_cache(
    hf_home: Path, model_cache: Path, tmp_path: Path
) -> None:
    environ = clean_environ(
        HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", DRAFTWISE_CACHE_DIR=str(model_cache)
    )
    process = ServerProcess.on_free_port(
        ["--model", REPO, "--draft-model", "none"], environ, tmp_path / "server.log"
    )
    with process.running() as ready:
        models = httpx.get(f"{ready.base_url}/v1/models").json()
        assert [m["id"] for m in models["data"]] == [REPO]
        body = {"prompt": "hi", "max_tokens": 3, "ignore_eos": True}
        answer = httpx.post(f"{ready.base_url}/v1/completions", json=body).json()
        assert answer["usage"]["completion_tokens"] == 3


def test_a_missing_model_id_fails_at_startup_naming_it_and_where_it_looked(
    hf_home: Path, model_cache: Path
) -> None:
    environ = clean_environ(
        HF_HOME=str(hf_home), HF_HUB_OFFLINE="1", DRAFTWISE_CACHE_DIR=str(model_cache)
    )
    code, stderr = run_to_exit(["--model", "draftwise-test/absent", "--port", "1"], environ)
    assert code == 2
    line = stderr.strip().splitlines()[-1]
    assert "--model='draftwise-test/absent'" in line
    assert str(hf_home / "hub") in line and "HF_HUB_OFFLINE" in line
