"""`draftwise calibrate`: which entry a sweep earns, the policy file, and startup's view of it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from policy import Device, PolicyError, Resolution, TableEntry, entries_to_json, resolve_width
from server.tooling.bench_record import Arm, Request, Run, build_record
from server.tooling.calibrate import (
    EXIT_INCONCLUSIVE,
    Inconclusive,
    calibrate_from_record,
    default_calibration_path,
    entry_from_record,
    load_calibration,
    merge_entries,
)

REPO = Path(__file__).resolve().parents[3]


def arm(width: int | None, *speeds: float, sha: str = "same") -> Arm:
    runs = [Run((Request(0, 100, 100 / s, 0.01, 0, 0, 0, sha),)) for s in speeds]
    label = "classic" if width is None else f"width {width}"
    served = {"speculative": width is not None, "block_size": width}
    return Arm(label, width, runs, [], served)


def record(*middle: Arm, backend: str = "cpu", capability: str | None = None) -> dict:
    setup = {"backend": backend, "compute_capability": capability, "quantization": None}
    setup["dtype"] = "float32"
    host = {"mlx": "0.32.4", "blas": "openblas (/usr/lib/x86_64-linux-gnu/libblas.so.3)"}
    arms = [arm(None, 10, 11, 12), *middle, arm(None, 10, 11, 12)]
    return build_record(name="r", arms=arms, setup=setup, host=host)


def entry(
    width: int | None, quantization: str | None = None, record_path: str = "r.json"
) -> TableEntry:
    return TableEntry("cpu", None, quantization, "dflash", width, record_path, "0.32.4", "x")


def test_a_width_above_classic_earns_an_entry_for_the_swept_key() -> None:
    swept = record(arm(4, 20, 21, 22), arm(8, 15, 16, 17), backend="cuda", capability="9.0")
    earned = entry_from_record(swept, "records/r.json", "dflash")
    assert (earned.backend, earned.compute_capability, earned.quantization) == (
        "cuda",
        (9, 0),
        None,
    )
    assert earned.width == 4 and earned.blas is None  # a GPU entry holds for any CPU BLAS
    assert earned.record == "records/r.json" and earned.mlx_version == "0.32.4"
    assert "float32" in earned.remeasure_when and "openblas" in earned.remeasure_when


def test_every_width_losing_earns_a_classic_entry() -> None:
    earned = entry_from_record(record(arm(4, 5, 6, 7), arm(8, 3, 4, 5)), "r.json", "dflash")
    assert earned.width is None


def test_an_overlapping_sweep_earns_nothing_and_says_why() -> None:
    with pytest.raises(Inconclusive, match=r"width\(s\) 4 overlap"):
        entry_from_record(record(arm(4, 11, 12, 13), arm(8, 3, 4, 5)), "r.json", "dflash")


def test_missing_calibration_file_means_no_entries(tmp_path: Path) -> None:
    assert load_calibration(tmp_path / "absent.json") == ()


def test_malformed_calibration_file_stops_startup_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    path.write_text("{not json")
    with pytest.raises(PolicyError, match=str(path)):
        load_calibration(path)


def test_new_entry_replaces_its_key_and_keeps_the_others() -> None:
    old = (entry(4), entry(2, quantization="affine"))
    merged = merge_entries(old, entry(None, record_path="new.json"))
    assert merged == (entry(2, quantization="affine"), entry(None, record_path="new.json"))


def test_default_path_lives_under_the_cache_dir(tmp_path: Path) -> None:
    assert default_calibration_path(tmp_path) == tmp_path / "policy" / "calibration.json"


def resolve_here(blas: str, output: Path) -> Resolution:
    return resolve_width(
        overrides=[],
        drafter_kind="dflash",
        checkpoint_width=None,
        device=Device("cpu", blas=blas),
        quantization=None,
        max_width=16,
        calibration=load_calibration(output),
    )


def test_calibrated_file_is_what_resolve_width_uses_before_the_table(tmp_path: Path) -> None:
    output = tmp_path / "policy" / "calibration.json"
    calibrate_from_record(record(arm(5, 20, 21, 22)), "r.json", output, "dflash")
    resolution = resolve_here("openblas", output)
    assert (resolution.width, resolution.source) == (5, "calibration")
    assert "calibrated (r.json, mlx 0.32.4)" in resolution.reason


def test_a_cpu_calibration_holds_only_for_the_blas_it_was_measured_with(tmp_path: Path) -> None:
    output = tmp_path / "policy" / "calibration.json"
    calibrate_from_record(record(arm(5, 20, 21, 22)), "r.json", output, "dflash")
    (earned,) = load_calibration(output)
    assert earned.blas == "openblas"
    assert resolve_here("mkl", output).source == "policy"  # the built-in table's MKL entry


def test_an_entry_for_one_blas_keeps_the_entry_for_any_blas() -> None:
    any_blas, mkl = entry(3), replace(entry(4), blas="mkl")
    assert merge_entries((any_blas,), mkl) == (any_blas, mkl)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "server.cli", "calibrate", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_cli_from_record_merges_into_an_existing_policy_file(tmp_path: Path) -> None:
    output = tmp_path / "calibration.json"
    output.write_text(entries_to_json([entry(2, quantization="affine")]))
    swept = tmp_path / "sweep.json"
    swept.write_text(json.dumps(record(arm(5, 4, 5, 6))))
    result = run_cli("--from-record", str(swept), "--output", str(output))
    assert result.returncode == 0, result.stderr
    assert "cpu openblas unquantized dflash -> classic decode (every width lost)" in result.stdout
    widths = {(e.quantization, e.width) for e in load_calibration(output)}
    assert widths == {("affine", 2), (None, None)}


def test_cli_inconclusive_sweep_writes_nothing_and_exits_3(tmp_path: Path) -> None:
    output = tmp_path / "calibration.json"
    swept = tmp_path / "sweep.json"
    swept.write_text(json.dumps(record(arm(4, 11, 12, 13))))
    result = run_cli("--from-record", str(swept), "--output", str(output))
    assert result.returncode == EXIT_INCONCLUSIVE
    assert "calibration inconclusive" in result.stderr
    assert not output.exists()
