"""Settings: flags beat the environment, DRAFTWISE_ beats llama.cpp aliases, bad values
are reported as one line naming the flag or variable, and every variable is published."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from drafter.diagnostics import ACTIVATION_MODES
from policy import OVERRIDE_ENV_VARS, TableEntry
from server.cli import (
    SERVE_FLAGS,
    parse_args,
    read_calibration,
    settings_error_line,
    source_of,
)
from server.settings import (
    LiveSettings,
    ServeSettings,
    env_names,
    known_env_vars,
    setting_specs,
    unknown_env_vars,
)
from server.tooling.calibrate import default_calibration_path, write_calibration
from server.tooling.lab import split_args


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in known_env_vars():
        monkeypatch.delenv(name, raising=False)


def test_known_env_vars_cover_settings_aliases_and_width_overrides() -> None:
    names = known_env_vars()
    assert {"DRAFTWISE_MODEL", "DRAFTWISE_PORT", "DRAFTWISE_REQUEST_TIMEOUT_S"} <= names
    assert {"LLAMA_ARG_MODEL", "LLAMA_ARG_HOST", "LLAMA_ARG_PORT", "LLAMA_API_KEY"} <= names
    assert set(OVERRIDE_ENV_VARS) <= names
    assert "PORT" not in names


def test_a_flag_beats_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRAFTWISE_PORT", "9000")
    assert ServeSettings().port == 9000
    assert ServeSettings(port=9100).port == 9100


def test_the_draftwise_name_beats_the_llama_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMA_ARG_PORT", "9001")
    assert ServeSettings().port == 9001
    monkeypatch.setenv("DRAFTWISE_PORT", "9002")
    assert ServeSettings().port == 9002


def test_unprefixed_names_are_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORT", "1234")
    monkeypatch.setenv("MODEL", "/nowhere")
    assert ServeSettings().port == 8080


def test_a_model_must_be_a_saved_model_directory(tiny_model: Path, tmp_path: Path) -> None:
    assert ServeSettings(model=str(tiny_model)).model == str(tiny_model)
    with pytest.raises(ValidationError):
        ServeSettings(model=str(tmp_path))
    assert ServeSettings(draft_model="None").draft_model == "none"


def test_a_bad_environment_value_is_named_with_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLAMA_ARG_PORT", "eighty")
    with pytest.raises(ValidationError) as raised:
        ServeSettings()
    line = settings_error_line(raised.value, {}, {"LLAMA_ARG_PORT": "eighty"})
    assert line.startswith("error: invalid setting LLAMA_ARG_PORT='eighty'")
    assert "\n" not in line


def test_a_bad_flag_is_named_as_the_flag() -> None:
    with pytest.raises(ValidationError) as raised:
        ServeSettings(max_queue_depth="0")
    line = settings_error_line(raised.value, {"max_queue_depth": "0"}, {})
    assert "--max-queue-depth='0'" in line


def test_kernel_modes_are_no_serve_flags_but_the_lab_entry_takes_them() -> None:
    with pytest.raises(SystemExit):
        parse_args(["serve", "--activation", "mlx"])
    for mode in ACTIVATION_MODES:
        kernels, rest = split_args(["serve", "--activation", mode, "--port", "1"])
        assert kernels == {"activation": mode} and rest == ["serve", "--port", "1"]
    kernels, _ = split_args(["serve", "--attention", "exact", "--linear", "matrix"])
    assert kernels == {"attention": "exact", "linear": "matrix"}
    with pytest.raises(SystemExit):
        split_args(["serve", "--activation", "gelu"])


def test_the_source_of_a_setting_is_the_flag_first_then_the_first_variable_set() -> None:
    environ = {"LLAMA_ARG_MODEL": "/a", "DRAFTWISE_MODEL": "/b"}
    assert source_of("model", {"model": "/c"}, environ) == "--model"
    assert source_of("model", {}, environ) == "DRAFTWISE_MODEL"
    assert source_of("model", {}, {"LLAMA_ARG_MODEL": "/a"}) == "LLAMA_ARG_MODEL"


def test_unknown_draftwise_variables_are_reported() -> None:
    environ = {"DRAFTWISE_MODLE": "x", "DRAFTWISE_PORT": "1", "HOME": "/root"}
    assert unknown_env_vars(environ) == ["DRAFTWISE_MODLE"]


def test_every_serve_flag_is_a_setting_or_the_width_override() -> None:
    assert set(SERVE_FLAGS) == set(ServeSettings.model_fields) | {"draft_block_size"}
    args = parse_args(["serve", "--draft-block-size", "4", "--port", "1"])
    assert (args.draft_block_size, args.port, args.model) == ("4", "1", None)


def test_policy_explain_bench_and_calibrate_are_mounted() -> None:
    args = parse_args(["policy", "explain", "--backend", "cuda"])
    assert args.backend == "cuda"
    assert parse_args(["bench", "--widths", "2,4"]).widths == (2, 4)
    assert parse_args(["calibrate"]).command == "calibrate"


def test_serve_reads_the_calibration_file_under_the_cache_dir_by_default(tmp_path: Path) -> None:
    entry = TableEntry("cpu", None, None, "dflash", 3, "record", "0.32.4", "never")
    write_calibration(default_calibration_path(tmp_path), [entry])
    assert read_calibration(ServeSettings(cache_dir=tmp_path)) == (entry,)
    assert read_calibration(ServeSettings(cache_dir=tmp_path / "empty")) == ()


def test_flags_settings_table_and_scopes_come_from_one_declaration() -> None:
    from server.routes.settings import STARTUP_ONLY, TYPES, WORKER_OWNED

    specs = setting_specs()
    assert list(SERVE_FLAGS) == list(specs) == list(TYPES)
    assert all(spec.help for spec in specs.values())
    assert set(WORKER_OWNED) >= {"model", "draft_model", "draft_kind", "draft_block_size"}
    live = {name for name, spec in specs.items() if spec.scope == "live"}
    assert live == set(LiveSettings.model_fields)
    assert live.isdisjoint(WORKER_OWNED) and live.isdisjoint(STARTUP_ONLY)
    defaults = ServeSettings.model_construct()
    assert LiveSettings().model_dump() == {name: getattr(defaults, name) for name in live}
    assert (TYPES["port"], TYPES["default_top_p"], TYPES["host"]) == ("integer", "number", "string")


def test_every_setting_is_in_the_environment_variable_doc() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "environment-variables.md").read_text()
    for name in setting_specs():
        assert f"`{env_names(name)[0]}`" in doc, name
        assert f"`--{name.replace('_', '-')}`" in doc, name
