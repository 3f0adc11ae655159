"""Startup through real processes: bad values stop it (exit 2, one line naming the input),
flags beat environment variables, and the width resolution is logged as `dflash.config`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from drafter.dflash import write_random_drafter
from drafter.probe import PROBE_PROMPTS
from tests.cpu_entry import CPU_BLAS
from tests.e2e.serverproc import ServerProcess, clean_environ, free_port, run_to_exit

DRAFTER_MAX = 8


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"DRAFTWISE_PORT": "abc"}, "DRAFTWISE_PORT='abc'"),
        ({"LLAMA_ARG_PORT": "70000"}, "LLAMA_ARG_PORT='70000'"),
        ({"DRAFTWISE_MAX_QUEUE_DEPTH": "0"}, "DRAFTWISE_MAX_QUEUE_DEPTH='0'"),
        ({"DRAFTWISE_EXACTNESS": "maybe"}, "DRAFTWISE_EXACTNESS='maybe'"),
        ({"DRAFTWISE_BLAS": "fast"}, "DRAFTWISE_BLAS='fast'"),
    ],
)
def test_a_bad_environment_value_stops_startup_naming_it(env: dict[str, str], named: str) -> None:
    code, stderr = run_to_exit([], clean_environ(**env))
    assert code == 2
    (line,) = stderr.strip().splitlines()
    assert named in line and line.startswith("error:")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--port", "abc"], "--port='abc'"),
        (["--request-timeout-s", "0"], "--request-timeout-s='0'"),
        (["--log-level", "loud"], "--log-level='loud'"),
    ],
)
def test_a_bad_flag_value_stops_startup_naming_it(args: list[str], named: str) -> None:
    code, stderr = run_to_exit(args, clean_environ(DRAFTWISE_PORT="8080"))
    assert code == 2
    (line,) = stderr.strip().splitlines()
    assert named in line


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--draft-block-size", "abc"], {}, "--draft-block-size='abc'"),
        ([], {"LLAMA_ARG_DRAFT_BLOCK_SIZE": "1"}, "LLAMA_ARG_DRAFT_BLOCK_SIZE='1'"),
        ([], {"MLXCEL_DRAFT_BLOCK_SIZE": "x"}, "MLXCEL_DRAFT_BLOCK_SIZE='x'"),
    ],
)
def test_a_bad_block_size_stops_startup_naming_it(
    tiny_model: Path, args: list[str], env: dict[str, str], named: str
) -> None:
    args = ["--model", str(tiny_model), "--port", str(free_port()), *args]
    code, stderr = run_to_exit(args, clean_environ(**env))
    assert code == 2
    assert named in stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--model", "/no/such/model"], {}, "--model='/no/such/model'"),
        ([], {"LLAMA_ARG_MODEL": "/no/such/model"}, "LLAMA_ARG_MODEL='/no/such/model'"),
    ],
)
def test_a_missing_model_directory_stops_startup_naming_it(
    args: list[str], env: dict[str, str], named: str
) -> None:
    code, stderr = run_to_exit([*args, "--port", str(free_port())], clean_environ(**env))
    assert code == 2
    assert named in stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def drafter(tiny_model: Path, model_cache: Path) -> Path:
    return write_random_drafter(
        model_cache / "random-drafter", tiny_model, block_size=DRAFTER_MAX, seed=1
    )


OVERRIDES = {
    "flag": ({"DRAFTWISE_DRAFT_BLOCK_SIZE": "5", "LLAMA_ARG_DRAFT_BLOCK_SIZE": "6"}, "4"),
    "env:DRAFTWISE_DRAFT_BLOCK_SIZE": (
        {"DRAFTWISE_DRAFT_BLOCK_SIZE": "5", "MLXCEL_DRAFT_BLOCK_SIZE": "7"},
        None,
    ),
    "env:LLAMA_ARG_DRAFT_BLOCK_SIZE": (
        {"LLAMA_ARG_DRAFT_BLOCK_SIZE": "6", "MLXCEL_DRAFT_BLOCK_SIZE": "7"},
        None,
    ),
    "env:MLXCEL_DRAFT_BLOCK_SIZE": ({"MLXCEL_DRAFT_BLOCK_SIZE": "7"}, None),
    "calibration": ({}, None),  # DRAFTWISE_POLICY_FILE with an entry for this host
}
EXPECTED_WIDTH = {
    "flag": 4,
    "env:DRAFTWISE_DRAFT_BLOCK_SIZE": 5,
    "env:LLAMA_ARG_DRAFT_BLOCK_SIZE": 6,
    "env:MLXCEL_DRAFT_BLOCK_SIZE": 7,
    "calibration": 3,
}
CALIBRATION = {
    "backend": "cpu",
    "compute_capability": None,
    "quantization": None,
    "drafter_kind": "dflash",
    "width": 3,
    "record": "local calibration record",
    "mlx_version": "0.32.4",
    "remeasure_when": "never (test entry)",
}


@pytest.fixture(scope="module")
def override_servers(
    tiny_model: Path, drafter: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ServerProcess]]:
    """One server per override surface, started together. They also exercise the
    llama.cpp aliases (model and port from LLAMA_ARG_*) and a flag beating a bad env value."""
    logs = tmp_path_factory.mktemp("override-servers")
    policy_file = logs / "policy.json"
    policy_file.write_text(json.dumps({"entries": [CALIBRATION]}))
    servers = {}
    for source, (env, flag) in OVERRIDES.items():
        port = free_port()
        args = ["--draft-model", str(drafter), "--max-queue-depth", "4"]
        args += ["--draft-block-size", flag] if flag else []
        environ = clean_environ(
            **env,
            LLAMA_ARG_MODEL=str(tiny_model),
            LLAMA_ARG_PORT=str(port),
            DRAFTWISE_MAX_QUEUE_DEPTH="0",  # invalid, but the flag wins
            DRAFTWISE_POLICY_FILE=str(policy_file),
        )
        log_path = logs / f"{source.replace(':', '-')}.log"
        servers[source] = ServerProcess(args, environ, log_path, port).start()
    try:
        yield {source: server.wait_ready() for source, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()


@pytest.mark.parametrize("source", list(OVERRIDES))
def test_each_override_surface_sets_the_width_and_the_log_names_it(
    override_servers: dict[str, ServerProcess], source: str
) -> None:
    server = override_servers[source]
    config = server.wait_for_event("dflash.config")
    assert (config["block_size"], config["source"]) == (EXPECTED_WIDTH[source], source)
    assert config["speculative"] is True and config["drafter"].endswith("random-drafter")
    assert (config["exactness"], config["probe_tokens"]) == ("exact", 64 * len(PROBE_PROMPTS))
    ignored = [e["ignored"] for e in server.events() if e["event"] == "dflash.override_ignored"]
    assert ignored == config["ignored"]
    expected_ignored = len(OVERRIDES[source][0]) - (0 if OVERRIDES[source][1] else 1)
    assert len(ignored) == max(expected_ignored, 0)
    health = httpx.get(f"{server.base_url}/health").json()
    assert health["speculative"]["block_size"] == EXPECTED_WIDTH[source]


def test_speculative_greedy_output_equals_the_classic_servers(
    override_servers: dict[str, ServerProcess], server: ServerProcess, model_id: str
) -> None:
    from tests.e2e.conftest import auth

    body = {"model": model_id, "prompt": "def fib(n):", "max_tokens": 12, "temperature": 0}
    body["logit_bias"] = {"256": -100}
    classic = httpx.post(f"{server.base_url}/v1/completions", json=body, headers=auth()).json()
    speculative_server = override_servers["flag"]
    response = httpx.post(f"{speculative_server.base_url}/v1/completions", json=body)
    speculative = response.json()
    assert speculative["choices"][0]["text"] == classic["choices"][0]["text"]
    counts = speculative["usage"]["draftwise"]
    assert counts["block_size"] == 4 and counts["rounds"] >= 1
    widths = {int(w): rounds for w, rounds in counts["widths"].items()}
    assert sum(widths.values()) == counts["rounds"] and max(widths) <= 4
    assert counts["drafted"] == sum((w - 1) * rounds for w, rounds in widths.items())
    assert "draftwise" not in classic["usage"]


def spec_counters(base_url: str) -> tuple[float, float]:
    """/metrics' drafted and accepted token counters."""
    values = {}
    for line in httpx.get(f"{base_url}/metrics").text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("draftwise_spec_draft_tokens_total", "draftwise_spec_accepted_tokens_total"):
            values[name] = float(value)
    drafted = values["draftwise_spec_draft_tokens_total"]
    return drafted, values["draftwise_spec_accepted_tokens_total"]


def test_every_response_carries_its_speculative_counts_and_they_sum_to_the_metrics(
    override_servers: dict[str, ServerProcess],
) -> None:
    """Completions, chat (JSON and the stream's finishing chunk) and responses each say
    what speculation drafted and accepted for them; over the run that is what /metrics
    counts. The request log line carries the same counts. Seeded sampled requests run
    at the resolved width whatever the goodput control measured, so each one drafts."""
    server = override_servers["flag"]
    url = server.base_url
    before = spec_counters(url)
    seeded = {"temperature": 0.7, "seed": 7}
    common = {"max_tokens": 10, "ignore_eos": True, **seeded}
    messages = [{"role": "user", "content": "Count to five."}]
    counts = [
        httpx.post(f"{url}/v1/completions", json={"prompt": "def fib(n):", **common}).json()[
            "usage"
        ]["draftwise"],
        httpx.post(f"{url}/v1/chat/completions", json={"messages": messages, **common}).json()[
            "usage"
        ]["draftwise"],
        httpx.post(
            f"{url}/v1/responses",
            json={"input": "Count to five.", "max_output_tokens": 10, "ignore_eos": True, **seeded},
        ).json()["usage"]["draftwise"],
    ]
    stream = {"messages": messages, "stream": True, **common}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=stream) as response:
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line[6:7] == "{"]
    [finishing] = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    counts.append(finishing["draftwise"])
    for count in counts:
        assert count["block_size"] == 4 and count["rounds"] >= 1
        widths = {int(w): rounds for w, rounds in count["widths"].items()}
        assert sum(widths.values()) == count["rounds"] and max(widths) <= 4
        assert count["drafted"] == sum((w - 1) * rounds for w, rounds in widths.items())
        assert 0 <= count["accepted"] <= count["drafted"]
    after = spec_counters(url)
    assert after[0] - before[0] == sum(c["drafted"] for c in counts)
    assert after[1] - before[1] == sum(c["accepted"] for c in counts)
    logged = [e for e in server.events() if e.get("event") == "request" and "drafted" in e]
    assert [e["drafted"] for e in logged[-4:]] == [c["drafted"] for c in counts]


def test_a_width_above_the_drafters_maximum_stops_startup_after_loading(
    tiny_model: Path, drafter: Path
) -> None:
    args = ["--model", str(tiny_model), "--draft-model", str(drafter), "--port", str(free_port())]
    code, stderr = run_to_exit([*args, "--draft-block-size", str(DRAFTER_MAX + 1)], clean_environ())
    assert code == 2
    line = stderr.strip().splitlines()[-1]
    assert f"--draft-block-size='{DRAFTER_MAX + 1}'" in line and "maximum width 8" in line


def test_a_policy_file_that_is_not_valid_stops_startup_naming_it(tmp_path: Path) -> None:
    policy_file = tmp_path / "policy.json"
    policy_file.write_text("{not json")
    code, stderr = run_to_exit([], clean_environ(DRAFTWISE_POLICY_FILE=str(policy_file)))
    assert code == 2
    (line,) = stderr.strip().splitlines()
    assert f"DRAFTWISE_POLICY_FILE='{policy_file}'" in line and "not valid JSON" in line


@pytest.fixture(scope="module")
def mxfp4_model(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny target quantized to mxfp4: a quantization with no measured entry on CPU."""
    from mlx_lm.utils import load, quantize_model, save_config, save_model

    model, tokenizer, config = load(str(tiny_model), return_config=True)
    model, config = quantize_model(model, config, None, None, mode="mxfp4")
    path = tmp_path_factory.mktemp("mxfp4-target")
    save_model(path, model)
    save_config(config, path / "config.json")
    tokenizer.save_pretrained(str(path))
    return path


def test_an_unmeasured_configuration_logs_the_dflash_default_with_no_override(
    mxfp4_model: Path, tmp_path: Path
) -> None:
    args = ["--model", str(mxfp4_model)]
    server = ServerProcess.on_free_port(args, clean_environ(), tmp_path / "serve.log").start()
    try:
        config = server.wait_ready().wait_for_event("dflash.config")
    finally:
        server.stop()
    assert (config["block_size"], config["source"]) == (16, "default")
    assert (config["backend"], config["quantization"]) == ("cpu", "mxfp4")
    key = f"cpu {CPU_BLAS} mxfp4 dflash"  # the key names the BLAS the server bound
    assert config["reason"] == f"{key}: no measured entry; dflash default"
