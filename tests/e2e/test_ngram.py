"""`--draft-kind ngram` through the real server: prompt lookup, no drafter weights."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import API_KEY, auth
from tests.e2e.serverproc import ServerProcess, clean_environ

COPYING = "alpha beta gamma delta. alpha beta gamma delta. alpha beta gamma delta. alpha beta"


@pytest.fixture(scope="module")
def lookup_server(
    tiny_model: Path, model_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    process = ServerProcess.on_free_port(
        ["--model", str(tiny_model), "--draft-kind", "ngram"],
        clean_environ(DRAFTWISE_CACHE_DIR=str(model_cache), DRAFTWISE_API_KEY=API_KEY),
        tmp_path_factory.mktemp("ngram-server") / "server.log",
        API_KEY,
    )
    with process.running() as ready:
        yield ready


def test_a_lookup_server_speculates_and_answers_as_the_classic_one(
    lookup_server: ServerProcess, server: ServerProcess
) -> None:
    config = lookup_server.wait_for_event("dflash.config")
    assert (config["drafter"], config["block_size"], config["source"]) == ("ngram", 8, "default")
    assert config["speculative"] is True and config["exactness"] == "exact"
    body = {"prompt": COPYING, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
    classic = httpx.post(f"{server.base_url}/v1/completions", json=body, headers=auth()).json()
    url = f"{lookup_server.base_url}/v1/completions"
    lookup = httpx.post(url, json=body, headers=auth()).json()
    assert lookup["choices"][0]["text"] == classic["choices"][0]["text"]
    counts = lookup["usage"]["draftwise"]
    assert counts["block_size"] == 8 and counts["rounds"] >= 1
