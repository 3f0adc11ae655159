"""The kernel table: one bundle per backend, each mode in it backed by its record."""

from __future__ import annotations

from pathlib import Path

import pytest

from drafter import cpu_blas, device
from drafter.activation import HOOKS
from drafter.attention import CACHES, CUDNN_ENV
from drafter.cpu_blas import AMD, INTEL
from drafter.diagnostics import ACTIVATION_MODES, ATTENTION_MODES, LINEAR_MODES
from drafter.forward import Kernels
from drafter.kernels import BUNDLES, backend_bundle, kernels_for

RECORDS = Path(__file__).parents[2] / "docs" / "benchmark_results"


@pytest.mark.parametrize(
    ("backend", "vendor", "blas", "cudnn", "name"),
    [
        ("cuda", None, None, None, "cuda"),
        ("cuda", None, None, "0", "cuda"),
        ("cuda", None, None, "1", "cuda-cudnn"),  # the operator keeps cuDNN attention on
        ("cpu", AMD, "mkl", None, "cpu-amd-mkl"),
        ("cpu", AMD, "openblas", None, "cpu"),
        ("cpu", INTEL, "mkl", None, "cpu-intel"),
        ("cpu", None, "mkl", None, "cpu"),  # a vendor /proc/cpuinfo does not name
        ("metal", None, None, None, "metal"),
    ],
)
def test_each_backend_gets_its_bundle(
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
    vendor: str | None,
    blas: str | None,
    cudnn: str | None,
    name: str,
) -> None:
    monkeypatch.setattr(device, "on_cuda", lambda: backend == "cuda")
    monkeypatch.setattr(device, "on_cpu", lambda: backend == "cpu")
    monkeypatch.setattr(cpu_blas, "cpu_vendor", lambda: vendor)
    monkeypatch.setattr(cpu_blas, "bound_blas", lambda: blas)
    if cudnn is None:
        monkeypatch.delenv(CUDNN_ENV, raising=False)
    else:
        monkeypatch.setenv(CUDNN_ENV, cudnn)
    assert backend_bundle().name == name


def test_metal_runs_mlxs_own_kernels_and_every_other_bundle_names_its_record() -> None:
    assert BUNDLES["metal"].kernels == Kernels("exact", "matrix", "mlx")
    for bundle in BUNDLES.values():
        if bundle.kernels != Kernels() or bundle.speculating is not None:
            assert bundle.record is not None and (RECORDS / bundle.record).is_file()


def test_only_modes_some_bundle_serves_exist() -> None:
    """A mode no bundle serves has no record that it pays anywhere: it is not kept."""
    served = [kernels_for(b, s) for b in BUNDLES.values() for s in (False, True)]
    assert {k.attention for k in served} == set(ATTENTION_MODES) == {"exact", *CACHES}
    assert {k.linear for k in served} == set(LINEAR_MODES)
    assert {k.activation for k in served} == set(ACTIVATION_MODES) == {"mlx", *HOOKS}


def test_an_intel_cpu_takes_polyexps_swiglu_only_when_speculating() -> None:
    bundle = BUNDLES["cpu-intel"]
    assert kernels_for(bundle, False).activation == "mlx"
    assert kernels_for(bundle, True).activation == "polyexp"
    assert kernels_for(BUNDLES["cuda"], True) == kernels_for(BUNDLES["cuda"], False)
