"""The BLAS re-exec, and what the process then binds and the width policy sees,
checked in real child processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from server.blas import (
    BLAS_ENV,
    MKL_SETTINGS,
    REEXEC_MARKER,
    Blas,
    BlasSettingError,
    blas_mode,
    choose_blas,
    find_mkl,
    find_openblas,
    plan_reexec,
)

REPO = Path(__file__).resolve().parents[2]
OPENBLAS = find_openblas()
MKL = find_mkl()
# A child that optionally re-execs, then imports MLX, multiplies, and reports what it
# bound and what the width policy sees.
CHILD = """
import json, os, sys
from server.blas import reexec_with_chosen_blas
reason = reexec_with_chosen_blas(sys.orig_argv, os.environ)
import mlx.core as mx
from drafter.cpu_blas import blas_in_use
from drafter.device import probe_device
value = (mx.ones((8, 16)) @ mx.ones((16, 4))).sum().item()
print(json.dumps({"reason": reason, "blas": blas_in_use(), "value": value,
                  "policy_blas": probe_device().blas,
                  "preload": os.environ.get("LD_PRELOAD", ""),
                  "cbwr": os.environ.get("MKL_CBWR")}))
"""
OPEN = Blas("openblas", Path("/x/libblas.so.3"))


def clean_env(**extra: str) -> dict[str, str]:
    dropped = ("LD_PRELOAD", REEXEC_MARKER, BLAS_ENV, "MKL_CBWR")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PYTHONPATH"] = str(REPO)
    return {**env, **extra}


def run_child(env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_this_host_has_openblas_and_mkl_installed_for_the_blas_tests() -> None:
    assert OPENBLAS is not None, "install it: apt-get install -y libopenblas0-pthread"
    assert MKL is not None, "install the cpu extra (it brings the mkl wheel)"


def test_plain_mlx_process_uses_the_reference_blas_bundled_with_mlx() -> None:
    child = run_child(clean_env(**{BLAS_ENV: "bundled"}))
    assert child["reason"] == f"{BLAS_ENV}=bundled: keeping the BLAS bundled with MLX"
    assert child["preload"] == ""
    assert child["blas"].startswith("reference (")
    assert "mlx" in child["blas"]
    assert child["policy_blas"] == "reference"
    assert child["value"] == 8 * 16 * 4


def test_openblas_setting_reexecs_with_openblas_preloaded_before_mlx_loads() -> None:
    child = run_child(clean_env(**{BLAS_ENV: "openblas"}))
    assert child["reason"] == f"re-executed with openblas ({BLAS_ENV}=openblas) preloaded"
    assert child["preload"].split()[0] == str(OPENBLAS)
    assert child["blas"].startswith("openblas (")
    assert child["policy_blas"] == "openblas"
    assert child["value"] == 8 * 16 * 4


def test_mkl_setting_reexecs_with_mkl_in_strict_reproducible_mode() -> None:
    child = run_child(clean_env(**{BLAS_ENV: "mkl"}))
    assert child["reason"] == f"re-executed with mkl ({BLAS_ENV}=mkl) preloaded"
    assert child["preload"].split()[0] == str(MKL)
    assert child["cbwr"] == "AUTO,STRICT"
    assert child["blas"].startswith("mkl (") and child["blas"].endswith("MKL_CBWR=AUTO,STRICT")
    assert child["policy_blas"] == "mkl"  # the width policy's input: MKL's own entry
    assert child["value"] == 8 * 16 * 4


def test_an_operators_own_mkl_cbwr_is_kept() -> None:
    child = run_child(clean_env(**{BLAS_ENV: "mkl", "MKL_CBWR": "COMPATIBLE"}))
    assert child["cbwr"] == "COMPATIBLE"
    assert child["blas"].endswith("MKL_CBWR=COMPATIBLE")


def test_auto_reexecs_with_the_blas_this_host_has() -> None:
    child = run_child(clean_env())
    kind = "mkl" if MKL is not None else "openblas"
    why = "MKL" if kind == "mkl" else "OpenBLAS"
    assert child["reason"] == f"re-executed with {kind} (auto: {why}) preloaded"
    assert child["blas"].startswith(f"{kind} (")


def test_auto_takes_mkl_where_installed_then_openblas() -> None:
    mkl, openblas = Path("/v/lib/libmkl_rt.so.3"), Path("/x/libblas.so.3")
    both, why = choose_blas("auto", mkl, openblas)
    assert both == Blas("mkl", mkl, MKL_SETTINGS) and why == "auto: MKL"
    only_openblas, why = choose_blas("auto", None, openblas)
    assert only_openblas == Blas("openblas", openblas) and why == "auto: OpenBLAS"
    none, why = choose_blas("auto", None, None)
    assert none is None and "keeping the BLAS bundled with MLX" in why


@pytest.mark.parametrize(("mode", "hint"), [("mkl", "pip install mkl"), ("openblas", "apt-get")])
def test_naming_a_blas_that_is_not_installed_is_an_error_naming_the_variable(
    mode: str, hint: str
) -> None:
    with pytest.raises(BlasSettingError, match=f"{BLAS_ENV}={mode}: it is not installed.*{hint}"):
        choose_blas(mode, None, None)


def test_a_bad_blas_setting_stops_serve_with_a_message_naming_it() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "server.cli", "serve"],
        env=clean_env(**{BLAS_ENV: "atlas"}),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert f"{BLAS_ENV}='atlas' is not one of auto, mkl, openblas, bundled" in out.stderr


def test_reexec_keeps_an_existing_preload_after_the_blas() -> None:
    env, reason = plan_reexec({"LD_PRELOAD": "/opt/libfoo.so"}, OPEN, "auto: OpenBLAS")
    assert env is not None
    assert reason == "auto: OpenBLAS: re-executing with LD_PRELOAD=/x/libblas.so.3"
    assert env["LD_PRELOAD"] == "/x/libblas.so.3 /opt/libfoo.so"
    assert env[REEXEC_MARKER] == "openblas (auto: OpenBLAS)"


def test_no_reexec_without_a_blas_to_preload_and_the_reason_is_kept() -> None:
    env, reason = plan_reexec({}, None, "auto: nothing installed")
    assert env is None and reason == "auto: nothing installed"


def test_no_second_reexec_once_marked() -> None:
    env, reason = plan_reexec({REEXEC_MARKER: "mkl (auto: MKL on an Intel CPU)"}, OPEN, "auto")
    assert env is None and reason == "re-executed with mkl (auto: MKL on an Intel CPU) preloaded"


def test_no_reexec_when_the_library_is_already_preloaded() -> None:
    env, reason = plan_reexec({"LD_PRELOAD": "/x/libblas.so.3"}, OPEN, "auto")
    assert env is None and reason.startswith("openblas already preloaded")


def test_blas_setting_defaults_to_auto_and_rejects_unknown_values_by_name() -> None:
    assert blas_mode({}) == "auto"
    assert blas_mode({BLAS_ENV: ""}) == "auto"
    assert blas_mode({BLAS_ENV: "Bundled"}) == "bundled"
    assert blas_mode({BLAS_ENV: "MKL"}) == "mkl"
    with pytest.raises(BlasSettingError, match=f"{BLAS_ENV}='atlas'"):
        blas_mode({BLAS_ENV: "atlas"})
