"""BLAS detection and the OpenBLAS re-exec, checked in real child processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from server.blas import (
    BLAS_ENV,
    REEXEC_MARKER,
    BlasSettingError,
    blas_kind,
    blas_mode,
    find_openblas,
    mapped_libraries,
    plan_reexec,
)

REPO = Path(__file__).resolve().parents[2]
OPENBLAS = find_openblas()
# A child that optionally re-execs, then imports MLX, multiplies, and reports.
CHILD = """
import json, os, sys
from server.blas import blas_in_use, reexec_with_openblas_if_available
reason = reexec_with_openblas_if_available(sys.orig_argv, os.environ, {force_bundled})
import mlx.core as mx
value = (mx.ones((8, 16)) @ mx.ones((16, 4))).sum().item()
print(json.dumps({{"reason": reason, "blas": blas_in_use(), "value": value,
                  "preload": os.environ.get("LD_PRELOAD", "")}}))
"""


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", REEXEC_MARKER, BLAS_ENV)}
    env["PYTHONPATH"] = str(REPO)
    return {**env, **extra}


def run_child(env: dict[str, str], force_bundled: bool = False) -> dict:
    code = CHILD.format(force_bundled=force_bundled)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_this_host_has_openblas_installed_for_the_blas_tests() -> None:
    assert OPENBLAS is not None, "install it: apt-get install -y libopenblas0-pthread"


def test_plain_mlx_process_uses_the_reference_blas_bundled_with_mlx() -> None:
    child = run_child(clean_env(), force_bundled=True)
    assert child["blas"].startswith("reference (")
    assert "mlx" in child["blas"]
    assert child["value"] == 8 * 16 * 4


def test_preloaded_openblas_is_reported_as_the_blas_in_use() -> None:
    child = run_child(clean_env(LD_PRELOAD=str(OPENBLAS)), force_bundled=True)
    assert child["blas"].startswith("openblas (")
    assert child["value"] == 8 * 16 * 4


def test_auto_reexecs_with_openblas_preloaded_before_mlx_loads() -> None:
    child = run_child(clean_env(), force_bundled=False)
    assert child["reason"] == "already re-executed with OpenBLAS preloaded"
    assert child["preload"].split()[0] == str(OPENBLAS)
    assert child["blas"].startswith("openblas (")
    assert child["value"] == 8 * 16 * 4


def test_force_bundled_keeps_mlx_reference_blas_and_says_why() -> None:
    child = run_child(clean_env(), force_bundled=True)
    assert child["reason"] == f"{BLAS_ENV}=bundled: keeping the BLAS bundled with MLX"
    assert child["preload"] == ""
    assert child["blas"].startswith("reference (")


def test_reexec_keeps_an_existing_preload_after_openblas() -> None:
    env, reason = plan_reexec({"LD_PRELOAD": "/opt/libfoo.so"}, False, Path("/x/libblas.so.3"))
    assert env is not None and reason == "re-executing with LD_PRELOAD=/x/libblas.so.3"
    assert env["LD_PRELOAD"] == "/x/libblas.so.3 /opt/libfoo.so"
    assert env[REEXEC_MARKER] == "1"


def test_no_reexec_without_an_installed_openblas() -> None:
    env, reason = plan_reexec({}, False, None)
    assert env is None
    assert "no OpenBLAS installed" in reason


def test_no_second_reexec_once_marked() -> None:
    env, reason = plan_reexec({REEXEC_MARKER: "1"}, False, Path("/x/libblas.so.3"))
    assert env is None and reason.startswith("already re-executed")


def test_no_reexec_when_the_library_is_already_preloaded() -> None:
    env, reason = plan_reexec({"LD_PRELOAD": "/x/libblas.so.3"}, False, Path("/x/libblas.so.3"))
    assert env is None and reason.startswith("OpenBLAS already preloaded")


def test_blas_setting_defaults_to_auto_and_rejects_unknown_values_by_name() -> None:
    assert blas_mode({}) == "auto"
    assert blas_mode({BLAS_ENV: ""}) == "auto"
    assert blas_mode({BLAS_ENV: "Bundled"}) == "bundled"
    with pytest.raises(BlasSettingError, match=f"{BLAS_ENV}='mkl'"):
        blas_mode({BLAS_ENV: "mkl"})


def test_blas_kind_names_the_library_family() -> None:
    assert blas_kind("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3") == "openblas"
    assert blas_kind("/venv/mlx_cpu.libs/libblas-bd8a282c.so.3.10.0") == "reference"
    assert blas_kind("/opt/intel/libmkl_rt.so.2") == "mkl"


def test_mapped_libraries_reads_this_process_maps() -> None:
    libraries = mapped_libraries()
    assert any(os.path.basename(p).startswith("libc.so") for p in libraries)
    assert mapped_libraries("/nonexistent/maps") == []
