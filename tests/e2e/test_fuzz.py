"""schemathesis against the real server's own OpenAPI schema: no input makes a 5xx,
every answer matches the schema (status, content type, body, headers), and a rejected
settings patch changes nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.e2e.serverproc import ServerProcess, clean_environ

API_KEY = "sk-fuzz"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
# Keeps each generated completion cheap; values outside 1..CONTEXT stay as generated.
CHEAP_MAX_TOKENS = 4
CONTEXT = 2048
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
EXAMPLES = {
    ("POST", "/v1/completions", GenerationMode.POSITIVE): 100,
    ("POST", "/v1/completions", GenerationMode.NEGATIVE): 40,
    ("PATCH", "/v1/settings", GenerationMode.POSITIVE): 40,
    ("PATCH", "/v1/settings", GenerationMode.NEGATIVE): 30,
    ("GET", "/v1/settings", GenerationMode.POSITIVE): 5,
}


@pytest.fixture(scope="module")
def fuzz_server(tiny_model: Path, tmp_path: Path) -> Iterator[ServerProcess]:
    args = ["--model", str(tiny_model), "--api-key", API_KEY]
    args += ["--default-max-tokens", str(CHEAP_MAX_TOKENS), "--max-body-bytes", "65536"]
    process = ServerProcess.on_free_port(args, clean_environ(), tmp_path / "server.log", API_KEY)
    with process.running() as ready:
        yield ready


@pytest.fixture(scope="module")
def tmp_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def served(case: Any, model_id: str) -> None:
    """Name the served model (a random name is a 404 and would hide everything after it)
    and cap generation length where the request is valid anyway (speed is not under test
    here); out-of-range values reach the server as generated."""
    body = case.body
    if not isinstance(body, dict):
        return
    if isinstance(body.get("model"), str):
        body["model"] = model_id
    if type(body.get("max_tokens")) is int and CHEAP_MAX_TOKENS < body["max_tokens"] <= CONTEXT:
        body["max_tokens"] = CHEAP_MAX_TOKENS


def fuzz(operation: Any, mode: GenerationMode, examples: int, check: Callable[[Any], None]) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        check(case)

    run()


@pytest.mark.parametrize(("method", "path", "mode"), list(EXAMPLES), ids=lambda v: str(v))
def test_no_generated_request_gets_a_5xx_or_an_answer_outside_the_schema(
    fuzz_server: ServerProcess, method: str, path: str, mode: GenerationMode
) -> None:
    base = fuzz_server.base_url
    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    operation = schema[path][method]
    checks = [*CHECKS, negative_data_rejection] if mode == GenerationMode.NEGATIVE else CHECKS
    with httpx.Client(base_url=base, headers=AUTH, timeout=60) as http:
        original = http.get("/v1/settings").json()
        model_id = http.get("/v1/models").json()["data"][0]["id"]

        def check(case: Any) -> None:
            if mode == GenerationMode.POSITIVE:
                served(case, model_id)
            response = case.call(base_url=base, headers=AUTH, timeout=60)
            case.validate_response(response, checks=checks, headers=AUTH)
            if method != "PATCH":
                return
            now = http.get("/v1/settings").json()
            if response.status_code >= 400:
                assert now == original, (
                    f"a rejected patch ({response.status_code}) changed settings"
                )
            else:  # put the live settings back so later examples see the defaults
                live = {k: v["value"] for k, v in original["settings"].items() if v["live"]}
                assert http.patch("/v1/settings", json=live).status_code == 200

        fuzz(operation, mode, EXAMPLES[(method, path, mode)], check)
    errors = [e for e in fuzz_server.events() if e.get("event") == "request.unhandled"]
    assert errors == []
