"""resolve_width: inputs in, (width, source, reason) out. Pure: no MLX, no environment."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from policy.entries import TableEntry, find_entry
from policy.inputs import Device, Override, PolicyError, describe_quantization
from policy.kinds import default_width
from policy.overrides import MIN_WIDTH, by_precedence, checked_width, override_width
from policy.table import TABLE


@dataclass(frozen=True)
class Resolution:
    """width None means serve classic decode; only a measured entry can say so."""

    width: int | None
    source: str
    reason: str
    ignored: tuple[Override, ...] = ()


def resolve_width(
    *,
    overrides: Sequence[Override],
    drafter_kind: str,
    checkpoint_width: int | None,
    device: Device,
    quantization: str | None,
    max_width: int | None = None,
    calibration: Sequence[TableEntry] = (),
) -> Resolution:
    """First match wins: overrides, checkpoint, calibration, built-in table, per-kind default.

    Every override is validated, including the ones that lose, so a typo never hides.
    """
    kind_default = default_width(drafter_kind)
    if max_width is not None and max_width < MIN_WIDTH:
        raise PolicyError(f"drafter maximum width {max_width} is below {MIN_WIDTH}")
    ordered = by_precedence(overrides)
    widths = [override_width(override, max_width) for override in ordered]
    if ordered:
        return _from_override(ordered, widths[0])
    if checkpoint_width is not None:
        width = checked_width(checkpoint_width, f"checkpoint width={checkpoint_width}", max_width)
        return Resolution(width, "checkpoint", f"drafter checkpoint prescribes width {width}")
    key = f"{device.describe()} {describe_quantization(quantization)} {drafter_kind}"
    for source, entries in (("calibration", calibration), ("policy", TABLE)):
        entry = find_entry(entries, device, quantization, drafter_kind)
        if entry is not None:
            return _from_entry(entry, source, key, max_width)
    width, cap_note = _capped(kind_default, max_width)
    reason = f"{key}: no measured entry; {drafter_kind} default{cap_note}"
    return Resolution(width, "default", reason)


def _from_override(ordered: list[Override], width: int) -> Resolution:
    winner, losers = ordered[0], tuple(ordered[1:])
    reason = winner.describe()
    if losers:
        reason += f" (ignored: {', '.join(loser.describe() for loser in losers)})"
    return Resolution(width, winner.origin, reason, losers)


def _from_entry(entry: TableEntry, source: str, key: str, max_width: int | None) -> Resolution:
    verdict = "measured" if source == "policy" else "calibrated"
    cited = f"({entry.record}, mlx {entry.mlx_version})"
    if entry.width is None:
        reason = f"{key}: {verdict}, every width loses to classic decode; serving classic {cited}"
        return Resolution(None, source, reason)
    width, cap_note = _capped(entry.width, max_width)
    return Resolution(width, source, f"{key}: {verdict} {cited}{cap_note}")


def _capped(width: int, max_width: int | None) -> tuple[int, str]:
    if max_width is None or width <= max_width:
        return width, ""
    return max_width, f"; {width} capped at the drafter's maximum {max_width}"
