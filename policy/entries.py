"""Measured width entries: the built-in table and calibration files share this shape."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from policy.inputs import BACKENDS, Device, PolicyError, describe_quantization
from policy.kinds import check_drafter_kind
from policy.overrides import MIN_WIDTH


@dataclass(frozen=True)
class TableEntry:
    """One measured answer for (device, quantization, drafter kind).

    width None means every width lost to classic decode there, so serve classic.
    record is the measurement it came from: a path under docs/benchmark_results/
    for the built-in table, or the calibration record for a local entry.
    blas (CPU only) None means the entry holds whatever BLAS the CPU uses; an entry
    that names the host's BLAS wins over one that does not (find_entry).
    """

    backend: str
    compute_capability: tuple[int, int] | None
    quantization: str | None
    drafter_kind: str
    width: int | None
    record: str
    mlx_version: str
    remeasure_when: str
    blas: str | None = None

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise PolicyError(f"table entry backend {self.backend!r} is not one of {BACKENDS}")
        Device(self.backend, self.compute_capability, self.blas)  # PolicyError if misplaced
        check_drafter_kind(self.drafter_kind)
        if self.width is not None and self.width < MIN_WIDTH:
            raise PolicyError(f"table entry width {self.width} is below {MIN_WIDTH}")
        if not self.record:
            raise PolicyError("table entry has no measurement record")

    @property
    def device(self) -> Device:
        return Device(self.backend, self.compute_capability, self.blas)

    @property
    def key(self) -> tuple[Device, str | None, str]:
        """What the entry answers for; a calibration replaces the entry with its key."""
        return self.device, self.quantization, self.drafter_kind

    def matches(self, device: Device, quantization: str | None, drafter_kind: str) -> bool:
        """Whether the entry applies to this host; an entry without a BLAS holds for any."""
        same_blas = self.blas is None or self.blas == device.blas
        here = (device.backend, device.compute_capability, quantization, drafter_kind)
        return same_blas and here == (
            self.backend,
            self.compute_capability,
            self.quantization,
            self.drafter_kind,
        )

    def describe_key(self) -> str:
        quant = describe_quantization(self.quantization)
        return f"{self.device.describe()} {quant} {self.drafter_kind}"


def find_entry(
    entries: Iterable[TableEntry], device: Device, quantization: str | None, drafter_kind: str
) -> TableEntry | None:
    """The first entry for this device, quantization and drafter kind; on CPU the first
    that names the host's BLAS, else the first that names none."""
    matching = [e for e in entries if e.matches(device, quantization, drafter_kind)]
    named = [e for e in matching if e.blas is not None]
    return (named or matching)[0] if matching else None


def entry_to_dict(entry: TableEntry) -> dict[str, Any]:
    data = asdict(entry)
    if entry.compute_capability is not None:
        data["compute_capability"] = list(entry.compute_capability)
    return data


def entry_from_dict(data: Mapping[str, Any]) -> TableEntry:
    if not isinstance(data, Mapping):
        raise PolicyError(f"policy entry {data!r} is not an object")
    fields = dict(data)
    capability = fields.get("compute_capability")
    if capability is not None:
        fields["compute_capability"] = (int(capability[0]), int(capability[1]))
    try:
        return TableEntry(**fields)
    except TypeError as error:
        raise PolicyError(f"malformed policy entry {dict(data)!r}: {error}") from error


def entries_to_json(entries: Sequence[TableEntry]) -> str:
    return json.dumps({"entries": [entry_to_dict(e) for e in entries]}, indent=2) + "\n"


def entries_from_json(text: str) -> tuple[TableEntry, ...]:
    """Entries from a policy file's text, e.g. one `draftwise calibrate` wrote."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise PolicyError(f"policy file is not valid JSON: {error}") from error
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise PolicyError('policy file must be an object with an "entries" list')
    return tuple(entry_from_dict(item) for item in data["entries"])
