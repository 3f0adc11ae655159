"""What the width policy needs to know about this host and the target, read from MLX and disk."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import mlx.core as mx

from drafter.cpu_blas import bound_blas
from drafter.files import config_value, read_config
from policy import Device

# mlx-lm's loader maps these legacy `quantization_config` methods to MLX modes.
_LEGACY_METHODS: dict[str, str] = {
    "mxfp4": "mxfp4",
    "mxfp8": "mxfp8",
    "modelopt": "nvfp4",
    "awq": "affine",
    "gptq": "affine",
}
_COMPRESSED_TENSORS_FORMATS: dict[str, str] = {
    "nvfp4-pack-quantized": "nvfp4",
    "mxfp4-pack-quantized": "mxfp4",
    "pack-quantized": "affine",
}


def probe_device() -> Device:
    """The backend MLX computes on by default and, on CUDA, its compute capability;
    on CPU, the BLAS its matmul binds to."""
    if mx.default_device().type == mx.cpu:
        return Device("cpu", blas=bound_blas())
    if mx.cuda.is_available():
        return device_from_info("cuda", mx.device_info())
    return Device("metal")


def on_cpu() -> bool:
    """Whether MLX computes on the CPU by default: where the BLAS sets how products
    run best (drafter/kernels.py)."""
    return mx.default_device().type == mx.cpu


def on_cuda() -> bool:
    """Whether MLX computes on a CUDA GPU by default: where multi-row attention builds
    cuDNN graphs per shape and multi-row products pay cuBLASLt's per-call setup, so
    vector attention (drafter/attention.py) and rowwise products (drafter/rowwise.py)
    pay. Elsewhere the exact-length, matrix-kernel paths cost nothing extra."""
    return mx.default_device().type == mx.gpu and mx.cuda.is_available()


def device_from_info(backend: str, info: Mapping[str, Any]) -> Device:
    """A policy Device from `mx.device_info()`; only CUDA reports a compute capability."""
    if backend != "cuda":
        return Device(backend)
    major = info.get("compute_capability_major")
    minor = info.get("compute_capability_minor")
    if major is None or minor is None:
        return Device("cuda")
    return Device("cuda", (int(major), int(minor)))


def read_quantization(config: Mapping[str, Any]) -> str | None:
    """The target's quantization mode from its config, or None when unquantized."""
    block = config.get("quantization") or config_value(config, "quantization_config")
    if not isinstance(block, Mapping) or not block:
        return None
    if block.get("mode"):
        return str(block["mode"])
    method = block.get("quant_method")
    if method is None:
        return "affine"
    if method == "compressed-tensors":
        return _COMPRESSED_TENSORS_FORMATS.get(str(block.get("format")), str(method))
    # An unknown method names itself so no measured entry matches it by mistake.
    return _LEGACY_METHODS.get(method, str(method))


def quantization_of(model_dir: Path) -> str | None:
    """The quantization mode of the model saved in model_dir, read from its config.json."""
    return read_quantization(read_config(model_dir))
