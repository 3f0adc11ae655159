"""/health, /v1/models, /metrics and the per-request log line of the running server."""

from __future__ import annotations

import time

import httpx

from drafter.cpu_blas import AMD, INTEL, cpu_vendor
from tests.cpu_entry import CPU_BLAS, CPU_RECORD, CPU_WIDTH
from tests.e2e.serverproc import ServerProcess


def test_health_reports_model_backend_and_the_width_resolution(server: ServerProcess) -> None:
    health = httpx.get(f"{server.base_url}/health").json()
    assert health["status"] == "ok"
    assert health["model"] == "tiny-qwen3-seed0"
    assert health["backend"] == "cpu"
    speculative = health["speculative"]
    # The measured entry for an unquantized target on CPU with this BLAS (policy/table.py).
    assert health["blas"].startswith(f"{CPU_BLAS} (")
    assert (speculative["block_size"], speculative["source"]) == (CPU_WIDTH, "policy")
    assert speculative["reason"].startswith(f"cpu {CPU_BLAS} unquantized dflash: measured")
    assert speculative["drafter"] == "none" and speculative["speculative"] is False
    # How products run under that BLAS on this CPU (drafter/kernels.py).
    padded = CPU_BLAS == "mkl" and cpu_vendor() == AMD
    assert speculative["linear"] == ("padded" if padded else "columns")
    other = "cpu-intel" if cpu_vendor() == INTEL else "cpu"
    assert speculative["kernels"] == ("cpu-amd-mkl" if padded else other)


def test_models_lists_the_served_model(http: httpx.Client, model_id: str) -> None:
    listing = http.get("/v1/models").json()
    assert listing["object"] == "list"
    assert [m["id"] for m in listing["data"]] == [model_id]
    assert http.get(f"/v1/models/{model_id}").json()["id"] == model_id
    assert http.get("/v1/models/other").json()["error"]["code"] == "model_not_found"


def test_metrics_expose_requests_tokens_queue_and_the_resolved_width(
    http: httpx.Client, model_id: str
) -> None:
    http.post("/v1/completions", json={"model": model_id, "prompt": "a", "max_tokens": 2})
    text = http.get("/metrics").text
    assert 'draftwise_requests_total{route="/v1/completions",status="200"}' in text
    assert "draftwise_completion_tokens_total" in text
    assert "draftwise_queue_depth 0.0" in text
    assert "draftwise_draft_block_size 0.0" in text  # no drafter: classic decode
    assert "draftwise_worker_ready 1.0" in text


def test_startup_and_dflash_config_lines_are_json(server: ServerProcess) -> None:
    events = {e["event"]: e for e in server.events()}
    assert events["server.starting"]["api_key"] == "set"
    config = events["dflash.config"]
    resolved = (config["block_size"], config["source"], config["backend"])
    assert resolved == (CPU_WIDTH, "policy", "cpu")
    assert CPU_RECORD in config["reason"]
    assert config["quantization"] is None
    assert config["draft_head_tokens"] is None  # no drafter
    assert (
        config["kernels"] == httpx.get(f"{server.base_url}/health").json()["speculative"]["kernels"]
    )
    assert events["server.ready"]["model"] == "tiny-qwen3-seed0"


def test_each_completion_logs_one_request_line(
    http: httpx.Client, server: ServerProcess, model_id: str
) -> None:
    # greedy and past any EOS, so the request always takes a decode step after the
    # prefill's token (sampled, it could stop at the first token and decode nothing)
    body = {"model": model_id, "prompt": "abc", "max_tokens": 2}
    body |= {"temperature": 0, "ignore_eos": True}
    response = http.post("/v1/completions", json=body)
    request_id = response.json()["id"]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = [e for e in server.events() if e.get("request_id") == request_id]
        if lines:
            break
        time.sleep(0.05)
    (line,) = lines
    assert line["event"] == "request" and line["status"] == 200
    assert line["prompt_tokens"] == 3 and line["completion_tokens"] == 2
    assert line["latency_ms"] > 0
    # the worker's prefill and decode times (the steps after the prefill's token), both
    # within the request
    assert line["prefill_ms"] > 0 and line["decode_ms"] > 0
    assert line["prefill_ms"] + line["decode_ms"] < line["latency_ms"]
