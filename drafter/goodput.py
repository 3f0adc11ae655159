"""Per batch step: how many rows to verify per request, from what was measured.

Speculation pays when a round's extra rows cost less than the tokens they
yield. One stream has idle hardware to spend on them; a full batch may not
(vllm#42505, llama.cpp#27342 saw speculation lose as concurrency grew). So the
process keeps two measurements and picks, per step, the width with the most
expected tokens per second:

    tokens(w) = B * (1 + sum_{k=1}^{w-1} P(the first k drafts are accepted))
    cost(w, B) = the step's measured wall time at that width and batch size
    width      = argmax_w tokens(w) / cost(w, B),  w in {1, 2, 4, ..., ceiling}

P(first k accepted) is counted over every speculating round, decayed so the
estimate follows the traffic; cost is the median of the last `SAMPLES` step
times per (w, B), so one slow step (a page fault, a collection) cannot rule a
width out. A width not yet measured at this batch size is tried once, and every
`REPROBE` steps the least recently measured one is tried again. Width 1 is a
classic step (no drafter). A batch of one always runs at the ceiling, the
startup-resolved width, which stays the default (see DESIGN.md).
No MLX here: the scheduler feeds it numbers.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

DECAY = 0.995  # per observed round: the acceptance counts' memory is ~200 rounds
SAMPLES = 5  # step times kept per (width, batch size)
REPROBE = 16  # steps between re-measurements of the stalest width


def candidate_widths(ceiling: int) -> list[int]:
    """1, then powers of two below the ceiling, then the ceiling."""
    widths, w = [1], 2
    while w < ceiling:
        widths.append(w)
        w *= 2
    return widths + ([ceiling] if ceiling > 1 else [])


@dataclass
class Choice:
    width: int
    reason: str  # "single" | "explore" | "reprobe" | "goodput" | "seeded"
    expected: dict[int, float] = field(default_factory=dict)  # width -> tokens/s estimate


class WidthControl:
    def __init__(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self.widths = candidate_widths(ceiling)
        # reached[k]: decayed count of rounds that drafted position k (1-based);
        # accepted[k]: of those, rounds whose first k drafts were all accepted.
        self.reached = [0.0] * ceiling
        self.accepted = [0.0] * ceiling
        self.times: dict[tuple[int, int], deque[float]] = {}
        self.measured_at: dict[tuple[int, int], int] = {}
        self.steps = 0

    def acceptance(self, k: int) -> float:
        """P(the first k drafts are accepted), with a weak prior of 1/2 per position."""
        return (self.accepted[k] + 0.5) / (self.reached[k] + 1.0)

    def expected_tokens(self, width: int) -> float:
        """Tokens one request emits per round at `width`."""
        return 1.0 + sum(self.acceptance(k) for k in range(1, width))

    def choose(self, batch: int, seeded: bool = False) -> Choice:
        """The step's width. seeded: a seeded sampled request is in the step; it runs at
        the ceiling, whatever was measured, so its random draws repeat."""
        self.steps += 1
        if seeded:
            return Choice(self.ceiling, "seeded")
        if batch <= 1 or self.ceiling <= 1:
            return Choice(self.ceiling, "single")
        unmeasured = [w for w in self.widths if (w, batch) not in self.times]
        if unmeasured:
            return Choice(unmeasured[0], "explore")
        if self.steps % REPROBE == 0:
            stalest = min(self.widths, key=lambda w: self.measured_at[(w, batch)])
            return Choice(stalest, "reprobe")
        expected = {w: batch * self.expected_tokens(w) / self.cost(w, batch) for w in self.widths}
        return Choice(max(expected, key=expected.__getitem__), "goodput", expected)

    def cost(self, width: int, batch: int) -> float:
        return statistics.median(self.times[(width, batch)])

    def observe_step(self, width: int, batch: int, seconds: float) -> None:
        key = (width, batch)
        self.times.setdefault(key, deque(maxlen=SAMPLES)).append(seconds)
        self.measured_at[key] = self.steps

    def observe_round(self, width: int, accepted: int) -> None:
        """One request's round: `accepted` of its width - 1 drafts were kept."""
        if width <= 1:
            return
        for k in range(1, self.ceiling):
            self.reached[k] *= DECAY
            self.accepted[k] *= DECAY
        for k in range(1, width):
            self.reached[k] += 1.0
            if accepted >= k:
                self.accepted[k] += 1.0
