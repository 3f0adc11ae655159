"""Which BLAS MLX's CPU backend calls, and switching to an installed OpenBLAS.

The Linux `mlx[cpu]` wheel links the reference netlib BLAS it bundles
(`mlx_cpu.libs/libblas-*.so`): float32 matmul runs at a few GFLOP/s. Debian's
OpenBLAS exports the same symbols (`sgemm_`, ...), so preloading it makes the
dynamic linker bind MLX's BLAS calls to OpenBLAS instead. LD_PRELOAD is read
only when a process starts, hence the re-exec, before MLX is imported.

Setting: DRAFTWISE_BLAS=auto (default: use OpenBLAS when installed) or
bundled (keep the BLAS the MLX wheel ships).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

BLAS_ENV = "DRAFTWISE_BLAS"
BLAS_MODES: tuple[str, ...] = ("auto", "bundled")
# Set on the re-executed process so it never re-executes again.
REEXEC_MARKER = "DRAFTWISE_BLAS_REEXEC"
# Libraries that export the reference Fortran BLAS symbols under their plain names.
OPENBLAS_CANDIDATES: tuple[str, ...] = (
    "/usr/lib/*-linux-gnu/openblas-pthread/libblas.so.3",
    "/usr/lib/*-linux-gnu/openblas-openmp/libblas.so.3",
    "/usr/lib/*-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib64/libopenblasp.so.0",
)
_PROBE_SYMBOL = "sgemm_"


class BlasSettingError(ValueError):
    pass


def blas_mode(environ: Mapping[str, str]) -> str:
    """DRAFTWISE_BLAS as one of BLAS_MODES; empty or unset means auto."""
    value = environ.get(BLAS_ENV, "").strip().lower() or "auto"
    if value not in BLAS_MODES:
        raise BlasSettingError(f"{BLAS_ENV}={value!r} is not one of {', '.join(BLAS_MODES)}")
    return value


def find_openblas(patterns: Sequence[str] = OPENBLAS_CANDIDATES) -> Path | None:
    """The first installed OpenBLAS that exports the plain BLAS symbols, or None."""
    for pattern in patterns:
        for match in sorted(glob.glob(pattern)):
            if Path(match).is_file():
                return Path(match)
    return None


def mapped_libraries(maps_path: str = "/proc/self/maps") -> list[str]:
    """Shared objects mapped into this process, in first-mapped order, from /proc/self/maps."""
    try:
        lines = Path(maps_path).read_text().splitlines()
    except OSError:
        return []
    seen: dict[str, None] = {}
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/") and ".so" in parts[5]:
            seen.setdefault(parts[5], None)
    return list(seen)


def blas_kind(path: str) -> str:
    name = os.path.basename(os.path.realpath(path)).lower()
    for kind in ("openblas", "mkl", "blis", "accelerate"):
        if kind in name or kind in path.lower():
            return kind
    return "reference"


def blas_in_use(maps_path: str = "/proc/self/maps") -> str:
    """`<kind> (<path>)` of the BLAS that MLX's CPU calls bind to in this process.

    A BLAS in the global symbol scope (LD_PRELOAD, or linked by the executable)
    wins over the copy the MLX wheel loads privately, so ask the dynamic linker
    who provides `sgemm_` globally first; otherwise report the mapped BLAS
    library (the MLX wheel's own). "none loaded" before MLX is imported.
    """
    provider = _global_symbol_provider(_PROBE_SYMBOL)
    if provider is not None:
        return f"{blas_kind(provider)} ({os.path.realpath(provider)})"
    for path in mapped_libraries(maps_path):
        name = os.path.basename(path)
        if name.startswith(("libblas", "libopenblas", "libmkl_rt", "libblis")):
            return f"{blas_kind(path)} ({path})"
    return "none loaded"


def _global_symbol_provider(symbol: str) -> str | None:
    """The file that provides `symbol` in the global scope (dlsym(RTLD_DEFAULT) + dladdr)."""

    class DlInfo(ctypes.Structure):
        _fields_ = [
            ("dli_fname", ctypes.c_char_p),
            ("dli_fbase", ctypes.c_void_p),
            ("dli_sname", ctypes.c_char_p),
            ("dli_saddr", ctypes.c_void_p),
        ]

    try:
        process = ctypes.CDLL(None)
        function = getattr(process, symbol)
        dladdr = process.dladdr
    except (AttributeError, OSError):
        return None
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    info = DlInfo()
    address = ctypes.cast(function, ctypes.c_void_p).value
    if not dladdr(address, ctypes.byref(info)) or not info.dli_fname:
        return None
    return info.dli_fname.decode()


def preloaded(environ: Mapping[str, str]) -> list[str]:
    return [p for p in environ.get("LD_PRELOAD", "").replace(":", " ").split() if p]


def openblas_environment(environ: Mapping[str, str], library: Path) -> dict[str, str]:
    """environ with `library` first in LD_PRELOAD and the re-exec marker set."""
    env = dict(environ)
    env["LD_PRELOAD"] = " ".join([str(library), *preloaded(environ)])
    env[REEXEC_MARKER] = "1"
    return env


def plan_reexec(
    environ: Mapping[str, str], force_bundled: bool, library: Path | None
) -> tuple[dict[str, str] | None, str]:
    """(environment to re-exec with, or None to carry on; why). Pure: the decision only."""
    if force_bundled:
        return None, f"{BLAS_ENV}=bundled: keeping the BLAS bundled with MLX"
    if environ.get(REEXEC_MARKER):
        return None, "already re-executed with OpenBLAS preloaded"
    if sys.platform != "linux":
        return None, f"not linux ({sys.platform}): MLX's own BLAS is kept"
    if library is None:
        return None, "no OpenBLAS installed (apt-get install libopenblas0-pthread)"
    if any(os.path.realpath(p) == os.path.realpath(library) for p in preloaded(environ)):
        return None, f"OpenBLAS already preloaded ({library})"
    return openblas_environment(environ, library), f"re-executing with LD_PRELOAD={library}"


def reexec_with_openblas_if_available(
    argv: Sequence[str], environ: Mapping[str, str], force_bundled: bool
) -> str:
    """Replace this process with itself plus OpenBLAS in LD_PRELOAD, when that applies.

    Call it first thing in the CLI, before `mlx` is imported, with `sys.orig_argv`
    (the interpreter's own command line, so `-m`/`-c`/console-script starts all
    survive). Returns why nothing was done; on re-exec it does not return.
    """
    env, reason = plan_reexec(environ, force_bundled, find_openblas())
    if env is None:
        return reason
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, list(argv), env)
    raise AssertionError("unreachable: execve returned")
