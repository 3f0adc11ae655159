"""Device and quantization probing on this CPU, from real MLX and real saved configs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm.utils import quantize_model, save_config

from drafter.checkpoints.tiny import QWEN3, build_model
from drafter.cpu_blas import bound_blas
from drafter.device import (
    device_from_info,
    probe_device,
    quantization_of,
    read_quantization,
)
from policy import Device, overrides_from, resolve_width

# What mx.device_info() reported on an NVIDIA H200 (shared/CUDA.md).
H200_INFO = {
    "compute_capability_major": 9,
    "compute_capability_minor": 0,
    "architecture": "sm_90",
    "device_name": "NVIDIA H200",
}


def quantized_config(mode: str) -> dict[str, Any]:
    """The config mlx-lm writes after quantizing a tiny Qwen3 in `mode`."""
    _, config = quantize_model(build_model(dict(QWEN3), seed=0), dict(QWEN3), None, None, mode=mode)
    return config


def saved_model_dir(tmp_path: Path, config: dict[str, Any]) -> Path:
    save_config(dict(config), tmp_path / "config.json")
    return tmp_path


def test_probe_device_on_this_cpu_host_is_cpu_with_its_blas_and_no_compute_capability() -> None:
    assert mx.default_device().type == mx.cpu
    assert bound_blas() is not None
    assert probe_device() == Device("cpu", None, bound_blas())


def test_this_cpu_device_info_gives_no_compute_capability() -> None:
    assert device_from_info("cpu", mx.device_info()) == Device("cpu")


def test_cuda_device_info_gives_the_compute_capability() -> None:
    assert device_from_info("cuda", H200_INFO) == Device("cuda", (9, 0))


def test_cuda_device_info_without_a_compute_capability_leaves_it_unknown() -> None:
    assert device_from_info("cuda", {"device_name": "NVIDIA"}) == Device("cuda", None)


def test_metal_device_info_gives_no_compute_capability() -> None:
    info = {"architecture": "applegpu_g15s", "device_name": "Apple M3 Max"}
    assert device_from_info("metal", info) == Device("metal")


@pytest.mark.parametrize("mode", ["affine", "mxfp4", "nvfp4", "mxfp8"])
def test_the_mode_mlx_lm_wrote_is_read_back_from_config_json(tmp_path: Path, mode: str) -> None:
    config = quantized_config(mode)
    assert config["quantization"]["mode"] == mode
    assert read_quantization(config) == mode
    assert quantization_of(saved_model_dir(tmp_path, config)) == mode


def test_an_unquantized_config_json_reads_as_none(tmp_path: Path) -> None:
    assert read_quantization(QWEN3) is None
    assert quantization_of(saved_model_dir(tmp_path, QWEN3)) is None


def test_a_quantization_block_without_a_mode_is_affine() -> None:
    # Older mlx-community conversions wrote only group_size and bits.
    assert read_quantization({**QWEN3, "quantization": {"group_size": 64, "bits": 4}}) == "affine"


def test_a_quantization_config_block_alone_is_read() -> None:
    block = {"group_size": 16, "bits": 4, "mode": "nvfp4"}
    assert read_quantization({**QWEN3, "quantization_config": block}) == "nvfp4"


@pytest.mark.parametrize(
    ("block", "mode"),
    [
        ({"quant_method": "mxfp4"}, "mxfp4"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, "affine"),
        ({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}, "nvfp4"),
        ({"quant_method": "bitnet"}, "bitnet"),
    ],
)
def test_hugging_face_quantization_configs_map_as_mlx_lm_loads_them(
    block: dict[str, Any], mode: str
) -> None:
    assert read_quantization({**QWEN3, "quantization_config": block}) == mode


def test_a_multimodal_text_config_quantization_is_read() -> None:
    config = {"text_config": {"quantization_config": {"quant_method": "mxfp4"}}}
    assert read_quantization(config) == "mxfp4"


def test_an_explicitly_null_quantization_reads_as_unquantized() -> None:
    assert read_quantization({**QWEN3, "quantization": None}) is None


def test_probed_unmeasured_quantization_resolves_to_the_default_here(tmp_path: Path) -> None:
    model_dir = saved_model_dir(tmp_path, quantized_config("mxfp4"))
    resolution = resolve_width(
        overrides=overrides_from(None, {}),
        drafter_kind="dflash",
        checkpoint_width=None,
        device=probe_device(),
        quantization=quantization_of(model_dir),
        max_width=16,
    )
    assert (resolution.width, resolution.source) == (16, "default")
    key = f"cpu {bound_blas()} mxfp4 dflash"
    assert resolution.reason == f"{key}: no measured entry; dflash default"
