"""Drafter kinds the project serves and the width each gets where nothing was measured."""

from __future__ import annotations

from policy.inputs import PolicyError

# DFlash is trained and published at block 16; every unmeasured host keeps it. A lookup
# drafter (ngram) drafts only as far as its match goes, so a wide block costs little
# where nothing matches.
_DEFAULT_WIDTHS: dict[str, int] = {"dflash": 16, "ngram": 8}
KNOWN_DRAFTER_KINDS: tuple[str, ...] = tuple(_DEFAULT_WIDTHS)


def check_drafter_kind(drafter_kind: str) -> None:
    if drafter_kind not in _DEFAULT_WIDTHS:
        known = ", ".join(KNOWN_DRAFTER_KINDS)
        raise PolicyError(f"drafter kind {drafter_kind!r} is not one of {known}")


def default_width(drafter_kind: str) -> int:
    check_drafter_kind(drafter_kind)
    return _DEFAULT_WIDTHS[drafter_kind]
