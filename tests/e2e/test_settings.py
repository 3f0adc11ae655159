"""GET/PATCH /v1/settings: live settings change atomically; worker-owned ones never do."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.cpu_entry import CPU_WIDTH

OWNED = "owned by the model worker; restart required"
LIVE = {"default_max_tokens", "default_temperature", "default_top_p", "request_timeout_s"}
LIVE |= {"log_level"}


def settings_of(http: httpx.Client) -> dict[str, Any]:
    response = http.get("/v1/settings")
    assert response.status_code == 200
    return response.json()["settings"]


@pytest.fixture
def restore_settings(http: httpx.Client) -> Iterator[None]:
    before = {name: s["value"] for name, s in settings_of(http).items() if s["live"]}
    yield
    assert http.patch("/v1/settings", json=before).status_code == 200


def test_every_setting_has_value_type_liveness_and_a_reason_when_read_only(
    http: httpx.Client,
) -> None:
    settings = settings_of(http)
    assert {name for name, s in settings.items() if s["live"]} == LIVE
    for setting in settings.values():
        assert setting["type"] in ("integer", "number", "string")
        assert ("reason" in setting) != setting["live"]
    for name in ("model", "draft_model", "draft_kind", "draft_block_size"):
        assert settings[name]["reason"] == OWNED
    assert settings["api_key"]["value"] == "<set>"


def test_the_width_resolution_is_visible_in_settings(http: httpx.Client) -> None:
    block = settings_of(http)["draft_block_size"]
    assert block["value"] == CPU_WIDTH  # the CPU entry (policy/table.py)
    assert block["source"] == "policy"
    assert "measured (docs/benchmark_results/" in block["resolution"]


@pytest.mark.parametrize("name", ["draft_block_size", "model", "draft_model", "draft_kind"])
def test_naming_a_worker_owned_setting_rejects_the_whole_patch_with_409(
    http: httpx.Client, name: str
) -> None:
    before = settings_of(http)
    response = http.patch("/v1/settings", json={"default_max_tokens": 3, name: 8})
    assert response.status_code == 409
    error = response.json()["error"]
    assert OWNED in error["message"] and error["param"] == name
    assert settings_of(http) == before


def test_draft_block_size_alone_is_409_and_nothing_changes(http: httpx.Client) -> None:
    before = settings_of(http)
    response = http.patch("/v1/settings", json={"draft_block_size": 8})
    assert response.status_code == 409
    assert response.json()["error"]["message"] == f"draft_block_size: {OWNED}"
    assert settings_of(http) == before


def test_startup_only_settings_are_409_too(http: httpx.Client) -> None:
    response = http.patch("/v1/settings", json={"port": 1234})
    assert response.status_code == 409
    assert "restart required" in response.json()["error"]["message"]


def test_unknown_names_are_400(http: httpx.Client) -> None:
    response = http.patch("/v1/settings", json={"default_max_tokens": 3, "max_tokenz": 3})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "max_tokenz"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("default_max_tokens", 0),
        ("default_max_tokens", "5"),
        ("default_temperature", 5.0),
        ("default_top_p", 0),
        ("request_timeout_s", -1),
        ("log_level", "loud"),
    ],
)
def test_invalid_values_are_400_naming_the_field_and_apply_nothing(
    http: httpx.Client, name: str, value: Any
) -> None:
    before = settings_of(http)
    response = http.patch("/v1/settings", json={"default_temperature": 0.5, name: value})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == name
    assert settings_of(http) == before


def test_a_body_that_is_not_an_object_is_400(http: httpx.Client) -> None:
    assert http.patch("/v1/settings", json=[1]).status_code == 400
    assert http.patch("/v1/settings", content=b"{").status_code == 400


def test_a_live_patch_changes_what_the_next_request_uses(
    http: httpx.Client, model_id: str, restore_settings: None
) -> None:
    response = http.patch("/v1/settings", json={"default_max_tokens": 3, "log_level": "WARNING"})
    assert response.status_code == 200
    assert response.json()["settings"]["default_max_tokens"]["value"] == 3
    assert response.json()["settings"]["log_level"]["value"] == "warning"
    body = {"model": model_id, "prompt": "a", "logit_bias": {"256": -100}}
    usage = http.post("/v1/completions", json=body).json()["usage"]
    assert usage["completion_tokens"] == 3


def test_a_request_past_request_timeout_s_is_504(
    http: httpx.Client, model_id: str, restore_settings: None
) -> None:
    assert http.patch("/v1/settings", json={"request_timeout_s": 1e-6}).status_code == 200
    response = http.post("/v1/completions", json={"model": model_id, "prompt": "a"})
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "request_timeout"
