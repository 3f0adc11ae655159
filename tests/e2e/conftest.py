"""One real server process for the whole session, driven over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from tokenizers import Tokenizer

from tests.e2e.serverproc import ServerProcess, clean_environ

API_KEY = "sk-test-draftwise"


def tiny_server(tiny_model: Path, model_cache: Path, log: Path, *args: str) -> ServerProcess:
    """A server of the tiny model, keyed, with `args` added to its command line."""
    return ServerProcess.on_free_port(
        ["--model", str(tiny_model), *args],
        clean_environ(DRAFTWISE_CACHE_DIR=str(model_cache), LLAMA_API_KEY=API_KEY),
        log,
        API_KEY,
    )


@pytest.fixture(scope="session")
def server(
    tiny_model: Path, model_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("server") / "server.log"
    with tiny_server(tiny_model, model_cache, log).running() as ready:
        yield ready


@pytest.fixture(scope="session")
def model_id(server: ServerProcess) -> str:
    response = httpx.get(f"{server.base_url}/v1/models", headers=auth())
    return response.json()["data"][0]["id"]


def auth(key: str = API_KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def http_client(server: ServerProcess) -> httpx.Client:
    """An httpx client of `server`, with the key."""
    return httpx.Client(base_url=server.base_url, headers=auth(), timeout=30.0)


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with http_client(server) as client:
        yield client


@pytest.fixture
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=API_KEY, max_retries=0)


@pytest.fixture(scope="session")
def tokenizer(tiny_model: Path) -> Tokenizer:
    """The served model's own tokenizer, to write prompts and biases as token ids."""
    return Tokenizer.from_file(str(tiny_model / "tokenizer.json"))


@pytest.fixture(scope="session")
def letters(tokenizer: Tokenizer) -> dict[str, float]:
    """A logit_bias that makes the tiny model write lowercase letters only."""
    return {str(tokenizer.token_to_id(chr(c))): 30.0 for c in range(ord("a"), ord("z") + 1)}
