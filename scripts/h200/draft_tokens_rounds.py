"""Round by round: greedy drafts read from the draft vocabulary's scores against drafts
read from the full-vocabulary row (-inf off the draft vocabulary) that cf117d8 built
every round (`DraftScores.tokens` against the argmax of `DraftScores.logits`, swapped in
`Session.draft`), with `ab.alternate_rounds`. The drafts are the same tokens (the
vocabulary's ids are distinct; ties aside). argv: width (default 4)."""

from __future__ import annotations

import sys

import mlx.core as mx
from ab import alternate_rounds, width8_engine

from drafter.decoding import DraftScores
from drafter.speculative import Session

WIDTH = int(sys.argv[1]) if len(sys.argv) > 1 else 4
new_draft = Session.draft


def full_row(self: Session, drafted: DraftScores) -> tuple[mx.array, mx.array | None]:
    return mx.argmax(drafted.logits(), axis=-1), None


def before() -> None:
    Session.draft = full_row  # type: ignore[method-assign]


def after() -> None:
    Session.draft = new_draft  # type: ignore[method-assign]


alternate_rounds(width8_engine(), {"before": before, "after": after}, WIDTH)
