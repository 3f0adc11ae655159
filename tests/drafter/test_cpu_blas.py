"""Naming the BLAS a process binds (the re-exec itself is tests/server/test_blas.py)."""

from __future__ import annotations

import os

import mlx.core as mx

from drafter.cpu_blas import blas_in_use, blas_kind, bound_blas, bound_library, mapped_libraries
from policy import CPU_BLAS


def test_blas_kind_names_the_library_family() -> None:
    assert blas_kind("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3") == "openblas"
    assert blas_kind("/venv/mlx_cpu.libs/libblas-bd8a282c.so.3.10.0") == "reference"
    assert blas_kind("/opt/intel/libmkl_rt.so.2") == "mkl"
    assert blas_kind("/usr/lib/libblis.so.4") == "blis"


def test_mapped_libraries_reads_this_process_maps() -> None:
    libraries = mapped_libraries()
    assert any(os.path.basename(p).startswith("libc.so") for p in libraries)
    assert mapped_libraries("/nonexistent/maps") == []


def test_this_process_binds_a_blas_the_policy_knows_and_reports_it_consistently() -> None:
    mx.eval(mx.ones((4, 4)) @ mx.ones((4, 4)))  # MLX is loaded, so its BLAS is mapped
    library = bound_library()
    assert library is not None
    kind = bound_blas()
    assert kind in CPU_BLAS
    assert blas_in_use().startswith(f"{kind} ({library})")
