"""`draftwise calibrate`: sweep the operator's own pair on this device, write a policy file.

The file holds `policy.TableEntry` items (`policy.entries_to_json`). At startup
the server reads it with `load_calibration` and passes the entries to
`resolve_width(calibration=...)`: after the overrides and the checkpoint width,
before the built-in table, with source `calibration`.

The entry for the swept key (backend, compute capability, quantization, kind):
the fastest width that beats classic decode with disjoint ranges and the same
text; width None (serve classic) when every width loses; nothing when the sweep
is inconclusive (some width overlaps classic, none beats it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from policy import (
    CPU_BLAS,
    KNOWN_DRAFTER_KINDS,
    PolicyError,
    TableEntry,
)
from server.policy_file import default_calibration_path, load_calibration, write_calibration
from server.tooling.bench import (
    BenchError,
    add_sweep_arguments,
    config_from_args,
    print_progress,
    run_sweep,
)
from server.tooling.bench_record import OVERLAPPING, all_widths_lose, best_width, write_record

EXIT_INCONCLUSIVE = 3


class Inconclusive(Exception):
    """No width beat classic with disjoint ranges, but not every width lost."""


def merge_entries(existing: Sequence[TableEntry], new: TableEntry) -> tuple[TableEntry, ...]:
    """`new` replaces an entry with the same key; entries for other keys are kept."""
    kept = [e for e in existing if e.key != new.key]
    return (*kept, new)


def entry_from_record(record: dict[str, Any], record_path: str, drafter_kind: str) -> TableEntry:
    """The calibration entry a sweep record earns; Inconclusive when it earns none."""
    width = best_width(record)
    if width is None and not all_widths_lose(record):
        raise Inconclusive(_inconclusive_reason(record))
    setup, host = record["setup"], record["host"]
    blas = str(host.get("blas", "?")).split(" ")[0]
    return TableEntry(
        backend=setup["backend"],
        compute_capability=_capability(setup.get("compute_capability")),
        blas=blas if setup["backend"] == "cpu" and blas in CPU_BLAS else None,
        quantization=setup.get("quantization"),
        drafter_kind=drafter_kind,
        width=width,
        record=record_path,
        mlx_version=str(host.get("mlx")),
        remeasure_when=(
            f"the target, drafter, target dtype ({setup.get('dtype')}), BLAS ({blas}) "
            "or MLX version changes: "
            "rerun draftwise calibrate"
        ),
    )


def _inconclusive_reason(record: dict[str, Any]) -> str:
    overlapping = [
        str(arm["width"])
        for arm in record["arms"]
        if arm["width"] is not None
        and arm["verdict"] == OVERLAPPING
        and arm["identical_to_classic"]
    ]
    return (
        f"no width beat classic decode with disjoint ranges, and width(s) {', '.join(overlapping)} "
        "overlap it: nothing written; rerun with a larger -n or --max-tokens"
    )


def _capability(value: Any) -> tuple[int, int] | None:
    if value in (None, ""):
        return None
    if isinstance(value, list | tuple):
        return int(value[0]), int(value[1])
    major, _, minor = str(value).partition(".")
    return int(major), int(minor or 0)


def describe_entry(entry: TableEntry) -> str:
    width = "classic decode (every width lost)" if entry.width is None else f"width {entry.width}"
    return f"{entry.describe_key()} -> {width} ({entry.record})"


def calibrate_from_record(
    record: dict[str, Any], record_path: str, output: Path, drafter_kind: str
) -> TableEntry:
    """Derive the entry, merge it into the policy file at `output`, return it."""
    entry = entry_from_record(record, record_path, drafter_kind)
    write_calibration(output, merge_entries(load_calibration(output), entry))
    return entry


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "calibrate", help="measure widths on this device and write a local policy file"
    )
    add_sweep_arguments(parser)
    parser.add_argument("--draft-kind", default="dflash", choices=KNOWN_DRAFTER_KINDS)
    parser.add_argument(
        "--output", type=Path, default=None, help="policy file (default: <cache dir>/policy/)"
    )
    parser.add_argument("--name", default=None, help="record name (default: host-pair-date)")
    parser.add_argument(
        "--from-record",
        type=Path,
        default=None,
        metavar="JSON",
        help="derive the entry from an existing sweep record instead of measuring",
    )
    parser.set_defaults(func=run_calibrate)
    return parser


def run_calibrate(args: argparse.Namespace) -> int:
    cache_dir = Path(args.cache_dir) if args.cache_dir else None
    output = args.output or default_calibration_path(cache_dir)
    try:
        if args.from_record is not None:
            record_path = args.from_record
            record = json.loads(record_path.read_text())
        else:
            config = config_from_args(args)
            kind = ("--draft-kind", args.draft_kind)
            config = replace(config, server_args=(*config.server_args, *kind))
            record = run_sweep(config, print_progress)
            _, record_path = write_record(record, output.parent / "records")
        entry = calibrate_from_record(record, str(record_path), output, args.draft_kind)
    except Inconclusive as reason:
        print(f"calibration inconclusive: {reason}", file=sys.stderr)
        return EXIT_INCONCLUSIVE
    except (BenchError, PolicyError, OSError, KeyError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    verdict = "beats" if entry.width is not None else "none beats"
    print(f"wrote {output}: {describe_entry(entry)}")
    print(f"({verdict} classic decode with disjoint ranges; source 'calibration' at next start)")
    return 0
