"""The built-in table is data with evidence: every entry cites a committed record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from policy import (
    QUANT_MODES,
    TABLE,
    Device,
    PolicyError,
    TableEntry,
    entries_from_json,
    entries_to_json,
    find_entry,
)

REPO = Path(__file__).resolve().parents[2]


def entry(**changes: object) -> TableEntry:
    fields: dict[str, object] = {
        "backend": "cuda",
        "compute_capability": (9, 0),
        "quantization": "nvfp4",
        "drafter_kind": "dflash",
        "width": 5,
        "record": "docs/benchmark_results/h200.md",
        "mlx_version": "0.32.4",
        "remeasure_when": "MLX moves the qmv/qmm switch",
    }
    return TableEntry(**(fields | changes))  # type: ignore[arg-type]


@pytest.mark.parametrize("table_entry", TABLE, ids=lambda e: e.describe_key())
def test_every_table_entry_cites_a_committed_record_under_benchmark_results(
    table_entry: TableEntry,
) -> None:
    assert table_entry.record.startswith("docs/benchmark_results/")
    record = REPO / table_entry.record
    assert record.is_file()
    assert table_entry.mlx_version in record.read_text()


@pytest.mark.parametrize("table_entry", TABLE, ids=lambda e: e.describe_key())
def test_every_table_entry_says_when_to_remeasure(table_entry: TableEntry) -> None:
    assert table_entry.remeasure_when.strip()
    assert table_entry.mlx_version.strip()


def test_the_table_holds_exactly_the_recorded_entries() -> None:
    assert [(e.device, e.quantization, e.drafter_kind, e.width) for e in TABLE] == [
        (Device("cuda", (12, 1)), "affine", "dflash", 4),  # published GB10 sweep
        (Device("cuda", (9, 0)), None, "dflash", 8),  # H200, bf16 default pair
        (Device("cuda", (9, 0)), "affine", "dflash", 4),  # H200, 4-bit g32 default pair
        (Device("cpu", blas="mkl"), None, "dflash", 4),  # Intel Xeon, float32, strict MKL
        (Device("cpu"), None, "dflash", 3),  # float32, any other BLAS (OpenBLAS measured)
        (Device("cpu"), "affine", "dflash", None),  # this CPU, 4-bit: every width lost
    ]
    assert TABLE[0].mlx_version == "81ba1c6a"


def test_the_gb10_record_holds_the_published_figures() -> None:
    text = (REPO / TABLE[0].record).read_text()
    figures = ["58.23", "68.47", "70.31", "68.14", "58.29", "55.57", "49.38", "48.35", "41.91"]
    figures += ["19.0", "24.5", "30.0", "40.8", "n = 3", "81ba1c6a"]
    assert [figure for figure in figures if figure not in text] == []
    assert "published GB10 sweep of Qwen3.5-4B 4-bit with its DFlash drafter" in text


def test_no_two_table_entries_share_a_key() -> None:
    keys = [(e.device, e.quantization, e.drafter_kind) for e in TABLE]
    assert len(keys) == len(set(keys))


def test_table_quantization_modes_are_known_ones() -> None:
    assert all(e.quantization in (None, *QUANT_MODES) for e in TABLE)


def test_find_entry_matches_device_quantization_and_kind_exactly() -> None:
    h200 = entry()
    assert find_entry([h200], Device("cuda", (9, 0)), "nvfp4", "dflash") == h200
    assert find_entry([h200], Device("cuda", (9, 0)), "affine", "dflash") is None
    assert find_entry([h200], Device("cuda"), "nvfp4", "dflash") is None


def test_a_cpu_entry_naming_the_hosts_blas_wins_over_one_naming_none() -> None:
    cpu = {"backend": "cpu", "compute_capability": None, "quantization": None}
    any_blas, mkl = entry(**cpu, width=3), entry(**cpu, blas="mkl", width=4)
    for order in ([any_blas, mkl], [mkl, any_blas]):
        assert find_entry(order, Device("cpu", blas="mkl"), None, "dflash") == mkl
        assert find_entry(order, Device("cpu", blas="openblas"), None, "dflash") == any_blas
        assert find_entry(order, Device("cpu"), None, "dflash") == any_blas
    assert find_entry([mkl], Device("cpu", blas="openblas"), None, "dflash") is None


def test_entries_round_trip_through_a_policy_file() -> None:
    entries = (
        entry(),
        entry(backend="cpu", compute_capability=None, quantization=None, width=None),
        entry(backend="cpu", compute_capability=None, blas="openblas"),
    )
    assert entries_from_json(entries_to_json(entries)) == entries


def test_a_policy_file_from_before_blas_keys_loads_and_holds_for_any_blas() -> None:
    data = json.loads(entries_to_json([entry(backend="cpu", compute_capability=None)]))
    del data["entries"][0]["blas"]
    (loaded,) = entries_from_json(json.dumps(data))
    assert loaded.blas is None
    assert loaded.matches(Device("cpu", blas="reference"), "nvfp4", "dflash")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "not valid JSON"),
        ("[]", 'an "entries" list'),
        ('{"entries": [3]}', "is not an object"),
        ('{"entries": [{"backend": "cpu"}]}', "malformed policy entry"),
    ],
)
def test_a_malformed_policy_file_is_an_error(text: str, problem: str) -> None:
    with pytest.raises(PolicyError, match=problem):
        entries_from_json(text)


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"width": 1}, "width 1 is below 2"),
        ({"backend": "tpu"}, "backend 'tpu'"),
        ({"drafter_kind": "medusa"}, "drafter kind 'medusa'"),
        ({"record": ""}, "no measurement record"),
        ({"blas": "mkl"}, "blas applies to cpu only, not cuda"),
        ({"backend": "cpu", "compute_capability": None, "blas": "atlas"}, "blas 'atlas'"),
    ],
)
def test_an_invalid_entry_is_refused_when_it_is_written(
    changes: dict[str, object], problem: str
) -> None:
    with pytest.raises(PolicyError, match=problem):
        entry(**changes)


@pytest.mark.parametrize("table_entry", TABLE, ids=lambda e: e.describe_key())
def test_every_remeasure_condition_is_one_short_line(table_entry: TableEntry) -> None:
    assert len(table_entry.remeasure_when) <= 200
    assert "\n" not in table_entry.remeasure_when


def test_every_record_is_in_the_index() -> None:
    results = REPO / "docs" / "benchmark_results"
    index = (results / "README.md").read_text()
    records = sorted(p.name for p in results.glob("*.md") if p.name != "README.md")
    assert records
    assert [name for name in records if f"]({name})" not in index] == []
