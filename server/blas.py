"""Choosing a fast installed BLAS for MLX's CPU backend, and preloading it.

(drafter/cpu_blas.py reads which one the process then binds; the width policy keys
CPU entries on it.)

The Linux `mlx[cpu]` wheel links the reference netlib BLAS it bundles
(`mlx_cpu.libs/libblas-*.so`): float32 matmul runs at a few GFLOP/s. Intel's
MKL (`libmkl_rt`, the `mkl` wheel of the `cpu` extra) and Debian's OpenBLAS
export the same symbols (`sgemm_`, ...), so preloading one makes the dynamic
linker bind MLX's BLAS calls to it instead. LD_PRELOAD is read only when a
process starts, hence the re-exec, before MLX is imported.

MKL runs with its strict conditional numerical reproducibility
(`MKL_CBWR=AUTO,STRICT`). On an Intel Xeon a row's product then has the same bits
whatever the number of rows, so a verify row equals the classic step's, and few-row
products cost little more than one (docs/benchmark_results/cpu-blas-mkl.md). On an AMD
EPYC strict mode does not give that (rows differ in the last bits, as OpenBLAS's do
there), so the startup exactness probe decides; MKL is still the faster BLAS there
(docs/benchmark_results/cpu-blas-amd.md). An operator's own `MKL_CBWR` wins.

Setting: DRAFTWISE_BLAS=auto (default: MKL when installed, else OpenBLAS when
installed, else the bundled BLAS), mkl, openblas, or bundled
(keep the BLAS the MLX wheel ships). Naming one that is not installed is an error.
"""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

BLAS_ENV = "DRAFTWISE_BLAS"
BLAS_MODES: tuple[str, ...] = ("auto", "mkl", "openblas", "bundled")
# Set on the re-executed process (to what was preloaded and why) so it never re-executes
# again, and its startup log still says why.
REEXEC_MARKER = "DRAFTWISE_BLAS_REEXEC"
# Libraries that export the reference Fortran BLAS symbols under their plain names.
OPENBLAS_CANDIDATES: tuple[str, ...] = (
    "/usr/lib/*-linux-gnu/openblas-pthread/libblas.so.3",
    "/usr/lib/*-linux-gnu/openblas-openmp/libblas.so.3",
    "/usr/lib/*-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib64/libopenblasp.so.0",
)
# The `mkl` wheel puts its libraries in the environment's lib/ (next to bin/python).
MKL_CANDIDATES: tuple[str, ...] = (
    os.path.join(sys.prefix, "lib", "libmkl_rt.so.*"),
    "/opt/intel/oneapi/mkl/latest/lib/libmkl_rt.so.*",
)
MKL_SETTINGS: dict[str, str] = {"MKL_CBWR": "AUTO,STRICT"}


@dataclass(frozen=True)
class Blas:
    """A BLAS to preload, and the environment it needs (an operator's values win)."""

    kind: str  # "mkl" | "openblas"
    library: Path
    settings: Mapping[str, str] = field(default_factory=dict)


class BlasSettingError(ValueError):
    pass


def blas_mode(environ: Mapping[str, str]) -> str:
    """DRAFTWISE_BLAS as one of BLAS_MODES; empty or unset means auto."""
    value = environ.get(BLAS_ENV, "").strip().lower() or "auto"
    if value not in BLAS_MODES:
        raise BlasSettingError(f"{BLAS_ENV}={value!r} is not one of {', '.join(BLAS_MODES)}")
    return value


def find_library(patterns: Sequence[str]) -> Path | None:
    """The first existing file that matches one of `patterns`, in order, or None."""
    for pattern in patterns:
        for match in sorted(glob.glob(pattern)):
            if Path(match).is_file():
                return Path(match)
    return None


def find_openblas(patterns: Sequence[str] = OPENBLAS_CANDIDATES) -> Path | None:
    """An installed OpenBLAS that exports the plain BLAS symbols, or None."""
    return find_library(patterns)


def find_mkl(patterns: Sequence[str] = MKL_CANDIDATES) -> Path | None:
    """An installed MKL single dynamic library (`libmkl_rt`), or None."""
    return find_library(patterns)


def choose_blas(mode: str, mkl: Path | None, openblas: Path | None) -> tuple[Blas | None, str]:
    """(the BLAS to preload, or None to keep the bundled one; why). Pure.

    auto takes MKL where it is installed (the `cpu` extra, x86-64 Linux): it was the
    faster BLAS on both CPUs measured, an Intel Xeon and an AMD EPYC; else OpenBLAS.
    Naming a BLAS that is not installed raises BlasSettingError."""
    found = {
        "mkl": None if mkl is None else Blas("mkl", mkl, MKL_SETTINGS),
        "openblas": None if openblas is None else Blas("openblas", openblas),
    }
    if mode == "bundled":
        return None, f"{BLAS_ENV}=bundled: keeping the BLAS bundled with MLX"
    if mode in found:
        if found[mode] is None:
            hint = "pip install mkl" if mode == "mkl" else "apt-get install libopenblas0-pthread"
            raise BlasSettingError(f"{BLAS_ENV}={mode}: it is not installed ({hint})")
        return found[mode], f"{BLAS_ENV}={mode}"
    if found["mkl"] is not None:
        return found["mkl"], "auto: MKL"
    if found["openblas"] is not None:
        return found["openblas"], "auto: OpenBLAS"
    return None, "auto: no MKL or OpenBLAS installed, keeping the BLAS bundled with MLX"


def preloaded(environ: Mapping[str, str]) -> list[str]:
    return [p for p in environ.get("LD_PRELOAD", "").replace(":", " ").split() if p]


def preload_environment(environ: Mapping[str, str], blas: Blas, why: str) -> dict[str, str]:
    """environ with `blas` first in LD_PRELOAD, its settings where the operator set none,
    and the re-exec marker set to what was preloaded and `why`."""
    env = {**blas.settings, **environ}
    env["LD_PRELOAD"] = " ".join([str(blas.library), *preloaded(environ)])
    env[REEXEC_MARKER] = f"{blas.kind} ({why})"
    return env


def plan_reexec(
    environ: Mapping[str, str], blas: Blas | None, why: str
) -> tuple[dict[str, str] | None, str]:
    """(environment to re-exec with, or None to carry on; why). Pure: the decision only."""
    if environ.get(REEXEC_MARKER):
        return None, f"re-executed with {environ[REEXEC_MARKER]} preloaded"
    if sys.platform != "linux":
        return None, f"not linux ({sys.platform}): MLX's own BLAS is kept"
    if blas is None:
        return None, why
    if any(os.path.realpath(p) == os.path.realpath(blas.library) for p in preloaded(environ)):
        return None, f"{blas.kind} already preloaded ({blas.library})"
    env = preload_environment(environ, blas, why)
    return env, f"{why}: re-executing with LD_PRELOAD={blas.library}"


def host_blas(environ: Mapping[str, str]) -> tuple[Blas | None, str]:
    """choose_blas for this host and environ's DRAFTWISE_BLAS (BlasSettingError if bad)."""
    return choose_blas(blas_mode(environ), find_mkl(), find_openblas())


def planned_environment(environ: Mapping[str, str]) -> tuple[dict[str, str] | None, str]:
    """plan_reexec for this host and environ's DRAFTWISE_BLAS (BlasSettingError if bad)."""
    return plan_reexec(environ, *host_blas(environ))


def reexec_with_chosen_blas(argv: Sequence[str], environ: Mapping[str, str]) -> str:
    """Replace this process with itself plus the chosen BLAS in LD_PRELOAD, when that
    applies (DRAFTWISE_BLAS; BlasSettingError if it is bad or names a missing BLAS).

    Call it first thing in the CLI, before `mlx` is imported, with `sys.orig_argv`
    (the interpreter's own command line, so `-m`/`-c`/console-script starts all
    survive). Returns why nothing was done; on re-exec it does not return.
    """
    env, reason = planned_environment(environ)
    if env is None:
        return reason
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, list(argv), env)
    raise AssertionError("unreachable: execve returned")
