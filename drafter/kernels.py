"""Which kernels the target runs with: one bundle per backend, chosen once at load.

A bundle names a mode for each of attention (drafter/attention.py), the linear layout
(drafter/linear.py) and the SwiGLU (drafter/activation.py). A mode other than MLX's own
is in a bundle only where a served A/B on its backend found it paying, and the bundle
names that record; Metal, measured by none, runs MLX's own kernels.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from drafter import cpu_blas, device
from drafter.attention import CUDNN_ENV
from drafter.forward import Kernels


@dataclass(frozen=True)
class Bundle:
    name: str
    kernels: Kernels
    record: str | None  # docs/benchmark_results/<record>: where its modes were measured
    speculating: Kernels | None = None  # when a drafter is loaded, if it differs


BUNDLES = {
    bundle.name: bundle
    for bundle in (
        Bundle("cuda", Kernels("vector", "rowwise"), "h100-vector-rows.md"),
        # vector attention needs cuDNN attention off; an operator who keeps it on gets MLX's
        Bundle("cuda-cudnn", Kernels("exact", "rowwise"), "h200-kept-views.md"),
        Bundle(
            "cpu-amd-mkl", Kernels("polyexp", "padded", "prefill"), "cpu-amd-prefill-polyexp.md"
        ),
        Bundle(
            "cpu-intel",
            Kernels("exact", "columns"),
            "cpu-intel-polyexp-served.md",
            speculating=Kernels("exact", "columns", "polyexp"),
        ),
        Bundle("cpu", Kernels("exact", "columns"), "cpu-default-pair-column-head.md"),
        Bundle("metal", Kernels(), None),
    )
}


def backend_bundle() -> Bundle:
    """This process's bundle: by backend, then (on a CPU) by vendor and BLAS."""
    if device.on_cuda():
        cudnn = os.environ.get(CUDNN_ENV, "0") != "0"
        return BUNDLES["cuda-cudnn" if cudnn else "cuda"]
    if not device.on_cpu():
        return BUNDLES["metal"]
    if cpu_blas.mkl_on_amd():
        return BUNDLES["cpu-amd-mkl"]
    return BUNDLES["cpu-intel" if cpu_blas.cpu_vendor() == cpu_blas.INTEL else "cpu"]


def kernels_for(bundle: Bundle, speculative: bool) -> Kernels:
    return bundle.speculating if speculative and bundle.speculating else bundle.kernels
