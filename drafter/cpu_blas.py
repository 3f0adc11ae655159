"""Which BLAS MLX's CPU matmul binds to in this process: a device fact.

On CPU the BLAS sets what a few-row verify forward costs against a one-row step
(docs/benchmark_results/cpu-blas-mkl.md), so the width policy keys CPU entries on
it (policy.Device.blas), next to the backend. server/blas.py chooses and preloads
one at startup; this module only reads which one won. It imports no MLX, so the
benchmark tooling can ask before it starts a server.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from policy import CPU_BLAS

_PROBE_SYMBOL = "sgemm_"


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
    """The BLAS family (one of policy.CPU_BLAS) a library path belongs to; any library
    not named after one is "reference"."""
    name = os.path.basename(os.path.realpath(path)).lower()
    for kind in CPU_BLAS:
        if kind in name or kind in path.lower():
            return kind
    return "reference"


def bound_library(maps_path: str = "/proc/self/maps") -> str | None:
    """The library MLX's CPU BLAS calls bind to in this process, or None before MLX is
    imported.

    A BLAS in the global symbol scope (LD_PRELOAD, or linked by the executable)
    wins over the copy the MLX wheel loads privately, so ask the dynamic linker
    who provides `sgemm_` globally first; otherwise take the mapped BLAS library
    (the MLX wheel's own).
    """
    provider = _global_symbol_provider(_PROBE_SYMBOL)
    if provider is not None:
        return os.path.realpath(provider)
    for path in mapped_libraries(maps_path):
        name = os.path.basename(path)
        if name.startswith(("libblas", "libopenblas", "libmkl_rt", "libblis")):
            return path
    return None


def bound_blas(maps_path: str = "/proc/self/maps") -> str | None:
    """The family (policy.CPU_BLAS) of the BLAS bound in this process, None if none is."""
    library = bound_library(maps_path)
    return None if library is None else blas_kind(library)


def blas_in_use(maps_path: str = "/proc/self/maps") -> str:
    """`<kind> (<path>)` of the bound BLAS for logs and /health; MKL's also names its
    reproducibility setting, which exactness rests on. "none loaded" before MLX is."""
    library = bound_library(maps_path)
    if library is None:
        return "none loaded"
    kind = blas_kind(library)
    cnr = f" MKL_CBWR={os.environ.get('MKL_CBWR', '')}" if kind == "mkl" else ""
    return f"{kind} ({library}){cnr}"


def cpu_vendor(cpuinfo_path: str = "/proc/cpuinfo") -> str | None:
    """The CPU's vendor id (`AuthenticAMD`, `GenuineIntel`, ...), None where unreadable.
    MKL takes other kernels on an AMD CPU than on an Intel one (cpu-blas-amd.md), so
    what pays under it was measured per vendor (drafter/kernels.py)."""
    try:
        lines = Path(cpuinfo_path).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            return value.strip()
    return None


AMD = "AuthenticAMD"
INTEL = "GenuineIntel"


def mkl_on_amd() -> bool:
    """Whether products run on MKL on an AMD CPU: the host where the padded layout
    (drafter/linear.py) and polyexp attention (drafter/attention.py) were measured to
    pay, and where a prompt's rows already round differently by forward size."""
    return bound_blas() == "mkl" and cpu_vendor() == AMD


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
