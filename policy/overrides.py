"""Collect and validate the operator's width overrides."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from policy.inputs import OVERRIDE_ENV_VARS, OVERRIDE_ORIGINS, Override, PolicyError

MIN_WIDTH = 2
_INTEGER = re.compile(r"[+-]?[0-9]+")


def overrides_from(flag: str | int | None, environ: Mapping[str, str]) -> list[Override]:
    """Every override that is set, highest precedence first; empty values count as unset."""
    candidates = [("flag", None if flag is None else str(flag))]
    candidates += [(f"env:{name}", environ.get(name)) for name in OVERRIDE_ENV_VARS]
    return [Override(origin, raw) for origin, raw in candidates if raw is not None and raw.strip()]


def by_precedence(overrides: Sequence[Override]) -> list[Override]:
    return sorted(overrides, key=lambda override: OVERRIDE_ORIGINS.index(override.origin))


def override_width(override: Override, max_width: int | None) -> int:
    """The override as a width, or a PolicyError naming the flag or variable and its value."""
    label = f"{override.name}={override.raw!r}"
    text = override.raw.strip()
    if not _INTEGER.fullmatch(text):
        raise PolicyError(f"{label} is not an integer")
    return checked_width(int(text), label, max_width)


def checked_width(width: int, label: str, max_width: int | None) -> int:
    if width < MIN_WIDTH:
        raise PolicyError(
            f"{label} is below {MIN_WIDTH}, the smallest block that drafts a token "
            "(width 1 would silently turn speculation off)"
        )
    if max_width is not None and width > max_width:
        raise PolicyError(f"{label} is above the drafter's maximum width {max_width}")
    return width
