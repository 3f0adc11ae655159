"""resolve_width per arm: device, quantization, drafter kind, checkpoint and calibration."""

from __future__ import annotations

import pytest

from policy import (
    KNOWN_DRAFTER_KINDS,
    QUANT_MODES,
    Device,
    PolicyError,
    Resolution,
    TableEntry,
    default_width,
    overrides_from,
    resolve_width,
)

GB10_RECORD = "docs/benchmark_results/gb10-qwen3.5-4b-4bit-dflash-published.md"
GB10 = Device("cuda", (12, 1))
H200 = Device("cuda", (9, 0))
H200_RECORD = "docs/benchmark_results/h200-seed1-drafter.md"
H200_AFFINE_RECORD = "docs/benchmark_results/h200-q4g32-heldout12-w3-w4-blk8.md"
V100 = Device("cuda", (7, 0))
ALL_QUANT = (None, *QUANT_MODES)


def resolve(
    device: Device,
    quantization: str | None,
    *,
    drafter_kind: str = "dflash",
    checkpoint_width: int | None = None,
    max_width: int | None = None,
    calibration: tuple[TableEntry, ...] = (),
    flag: str | int | None = None,
    environ: dict[str, str] | None = None,
) -> Resolution:
    return resolve_width(
        overrides=overrides_from(flag, environ or {}),
        drafter_kind=drafter_kind,
        checkpoint_width=checkpoint_width,
        device=device,
        quantization=quantization,
        max_width=max_width,
        calibration=calibration,
    )


def calibrated(device: Device, quantization: str | None, width: int | None) -> TableEntry:
    return TableEntry(
        backend=device.backend,
        compute_capability=device.compute_capability,
        quantization=quantization,
        drafter_kind="dflash",
        width=width,
        record="/var/lib/draftwise/calibration.md",
        mlx_version="0.32.4",
        remeasure_when="after any MLX upgrade",
    )


@pytest.mark.parametrize("quantization", ALL_QUANT)
def test_metal_hosts_get_the_dflash_default(quantization: str | None) -> None:
    resolution = resolve(Device("metal"), quantization)
    assert (resolution.width, resolution.source) == (16, "default")
    quant = quantization or "unquantized"
    assert resolution.reason == f"metal {quant} dflash: no measured entry; dflash default"


@pytest.mark.parametrize("blas", [None, "openblas", "reference", "blis"])
def test_an_unquantized_target_on_cpu_gets_the_measured_width_3(blas: str | None) -> None:
    resolution = resolve(Device("cpu", blas=blas), None)
    assert (resolution.width, resolution.source) == (3, "policy")
    assert "cpu-short-prompts.md" in resolution.reason
    assert resolution.reason.startswith(f"cpu {blas} unquantized" if blas else "cpu unquantized")


def test_an_unquantized_target_on_cpu_with_mkl_gets_its_own_measured_width_4() -> None:
    resolution = resolve(Device("cpu", blas="mkl"), None)
    assert (resolution.width, resolution.source) == (4, "policy")
    assert resolution.reason.startswith("cpu mkl unquantized dflash: measured")
    assert "cpu-heldout24-w3-w4-blk8.md" in resolution.reason


def test_a_4bit_target_on_cpu_with_mkl_keeps_the_classic_entry_for_any_blas() -> None:
    resolution = resolve(Device("cpu", blas="mkl"), "affine")
    assert (resolution.width, resolution.source) == (None, "policy")


def test_a_4bit_affine_target_on_cpu_is_served_classic_where_every_width_lost() -> None:
    resolution = resolve(Device("cpu"), "affine")
    assert (resolution.width, resolution.source) == (None, "policy")
    assert "every width loses" in resolution.reason
    assert "cpu-smollm2-135m-4bit-affine.md" in resolution.reason


@pytest.mark.parametrize("quantization", ["nvfp4", "mxfp4", "mxfp8"])
def test_unmeasured_quantizations_on_cpu_get_the_dflash_default(quantization: str) -> None:
    resolution = resolve(Device("cpu"), quantization)
    assert (resolution.width, resolution.source) == (16, "default")


def test_an_override_beats_the_cpu_classic_entry() -> None:
    resolution = resolve(Device("cpu"), "affine", flag="3")
    assert (resolution.width, resolution.source) == (3, "flag")


@pytest.mark.parametrize(
    ("device", "quantization"),
    [(V100, q) for q in ALL_QUANT] + [(H200, q) for q in QUANT_MODES if q != "affine"],
    ids=str,
)
def test_unmeasured_cuda_hosts_get_the_dflash_default(
    device: Device, quantization: str | None
) -> None:
    resolution = resolve(device, quantization)
    assert (resolution.width, resolution.source) == (16, "default")
    assert resolution.reason.startswith(f"{device.describe()} {quantization or 'unquantized'}")


def test_h200_unquantized_dflash_resolves_to_the_measured_width_8_citing_its_record() -> None:
    resolution = resolve(H200, None)
    assert resolution == Resolution(
        8, "policy", f"cuda 9.0 unquantized dflash: measured ({H200_RECORD}, mlx 0.32.4)"
    )


def test_h200_affine_dflash_resolves_to_the_measured_width_4_citing_its_record() -> None:
    resolution = resolve(H200, "affine")
    assert resolution == Resolution(
        4, "policy", f"cuda 9.0 affine dflash: measured ({H200_AFFINE_RECORD}, mlx 0.32.4)"
    )


def test_gb10_affine_dflash_resolves_to_the_measured_width_4_citing_its_record() -> None:
    resolution = resolve(GB10, "affine")
    assert resolution == Resolution(
        4, "policy", f"cuda 12.1 affine dflash: measured ({GB10_RECORD}, mlx 81ba1c6a)"
    )


@pytest.mark.parametrize("quantization", ["nvfp4", "mxfp4", "mxfp8", None])
def test_gb10_without_affine_quantization_keeps_the_default(quantization: str | None) -> None:
    resolution = resolve(GB10, quantization)
    assert (resolution.width, resolution.source) == (16, "default")


@pytest.mark.parametrize(
    "device", [Device("cuda", (12, 0)), Device("cuda", (11, 1)), Device("cuda")]
)
def test_the_gb10_entry_matches_only_compute_capability_12_1(device: Device) -> None:
    assert resolve(device, "affine").width == 16


@pytest.mark.parametrize("drafter_kind", KNOWN_DRAFTER_KINDS)
def test_each_drafter_kind_falls_back_to_its_own_default(drafter_kind: str) -> None:
    resolution = resolve(Device("metal"), None, drafter_kind=drafter_kind)
    assert resolution.width == default_width(drafter_kind) >= 2
    assert resolution.source == "default"
    assert f"{drafter_kind} default" in resolution.reason


def test_dflash_default_is_its_published_block_16() -> None:
    assert default_width("dflash") == 16


def test_an_unknown_drafter_kind_is_an_error_naming_it() -> None:
    with pytest.raises(PolicyError, match="drafter kind 'eagle3' is not one of dflash"):
        resolve(Device("cpu"), None, drafter_kind="eagle3")


def test_a_checkpoint_prescribed_width_is_kept_over_the_table() -> None:
    resolution = resolve(GB10, "affine", checkpoint_width=8)
    assert resolution == Resolution(8, "checkpoint", "drafter checkpoint prescribes width 8")


def test_an_override_beats_the_checkpoint_width() -> None:
    resolution = resolve(
        GB10, "affine", checkpoint_width=8, environ={"MLXCEL_DRAFT_BLOCK_SIZE": "3"}
    )
    assert (resolution.width, resolution.source) == (3, "env:MLXCEL_DRAFT_BLOCK_SIZE")


@pytest.mark.parametrize("width", [0, 1, -2])
def test_a_checkpoint_width_below_2_is_an_error(width: int) -> None:
    with pytest.raises(PolicyError, match=f"checkpoint width={width} is below 2"):
        resolve(Device("cpu"), None, checkpoint_width=width)


def test_a_checkpoint_width_above_the_drafter_maximum_is_an_error() -> None:
    with pytest.raises(
        PolicyError, match="checkpoint width=32 is above the drafter's maximum width 16"
    ):
        resolve(Device("cpu"), None, checkpoint_width=32, max_width=16)


def test_a_calibration_entry_beats_the_built_in_table() -> None:
    resolution = resolve(GB10, "affine", calibration=(calibrated(GB10, "affine", 3),))
    assert (resolution.width, resolution.source) == (3, "calibration")
    assert resolution.reason == (
        "cuda 12.1 affine dflash: calibrated (/var/lib/draftwise/calibration.md, mlx 0.32.4)"
    )


def test_a_calibration_entry_gives_an_unmeasured_host_a_measured_default() -> None:
    resolution = resolve(H200, "nvfp4", calibration=(calibrated(H200, "nvfp4", 6),))
    assert (resolution.width, resolution.source) == (6, "calibration")


def test_a_calibration_entry_for_another_key_leaves_the_table_in_charge() -> None:
    resolution = resolve(GB10, "affine", calibration=(calibrated(H200, "affine", 3),))
    assert (resolution.width, resolution.source) == (4, "policy")


def test_overrides_and_checkpoint_width_beat_calibration() -> None:
    calibration = (calibrated(GB10, "affine", 3),)
    assert resolve(GB10, "affine", calibration=calibration, flag=5).source == "flag"
    assert resolve(GB10, "affine", calibration=calibration, checkpoint_width=8).source == (
        "checkpoint"
    )


def test_an_entry_where_every_width_loses_serves_classic_decode_and_says_so() -> None:
    resolution = resolve(H200, "mxfp8", calibration=(calibrated(H200, "mxfp8", None),))
    assert (resolution.width, resolution.source) == (None, "calibration")
    assert "every width loses to classic decode; serving classic" in resolution.reason
    assert "/var/lib/draftwise/calibration.md" in resolution.reason


def test_an_override_still_wins_where_the_entry_says_classic() -> None:
    calibration = (calibrated(H200, "mxfp8", None),)
    resolution = resolve(H200, "mxfp8", calibration=calibration, flag="4")
    assert (resolution.width, resolution.source) == (4, "flag")


@pytest.mark.parametrize("drafter_kind", KNOWN_DRAFTER_KINDS)
@pytest.mark.parametrize("quantization", ALL_QUANT)
@pytest.mark.parametrize("device", [Device("metal"), Device("cuda"), V100, H200, GB10])
def test_the_default_path_never_produces_classic_or_a_width_below_2(
    device: Device, quantization: str | None, drafter_kind: str
) -> None:
    width = resolve(device, quantization, drafter_kind=drafter_kind).width
    assert width is not None and width >= 2


def test_the_default_is_capped_at_the_drafter_maximum_and_says_so() -> None:
    resolution = resolve(Device("metal"), None, max_width=8)
    assert (resolution.width, resolution.source) == (8, "default")
    assert resolution.reason.endswith("dflash default; 16 capped at the drafter's maximum 8")


def test_a_measured_width_is_capped_at_the_drafter_maximum() -> None:
    assert resolve(GB10, "affine", max_width=3).width == 3


def test_a_drafter_maximum_below_2_is_an_error() -> None:
    with pytest.raises(PolicyError, match="drafter maximum width 1 is below 2"):
        resolve(Device("cpu"), None, max_width=1)


def test_a_compute_capability_off_cuda_or_a_blas_off_cpu_is_an_error() -> None:
    with pytest.raises(PolicyError, match="compute capability applies to cuda only, not metal"):
        Device("metal", (9, 0))
    with pytest.raises(PolicyError, match="blas applies to cpu only"):
        Device("cuda", (9, 0), "mkl")


def test_an_unknown_backend_is_an_error_naming_it() -> None:
    with pytest.raises(PolicyError, match="backend 'rocm'"):
        Device("rocm")
