"""Serve with the drafter's forward as written (the CUDA default before the compiled
stages of drafter/compiled_draft.py), without a line of it in the serving path: the
control arm of scripts/h200/staged_served.sh.

Put this folder first on PYTHONPATH and every Python process started with it,
`draftwise serve` included, keeps `DFlashDrafter.staged` at None whatever the
activation; the verify's compiled feed-forward blocks stay as they are."""

import sys

from drafter.dflash import DFlashDrafter


def plain(self: DFlashDrafter, mode: str) -> None:
    self.staged = None


DFlashDrafter.set_activation = plain  # type: ignore[method-assign]
print("sitecustomize: the drafter's forward as written (no compiled stages)", file=sys.stderr)
