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

A lone greedy request gets its own per-round choice (`RowControl`): the drafter
drafts the whole block, and the round verifies only as many rows as its drafts'
own confidences pay for. c_k is the drafter's probability for its k-th draft
(the softmax maximum of its row), taken as the chance the target agrees:

    tokens(r) = 1 + sum_{k=1}^{r-1} c_1 * ... * c_k
    rows      = argmax_r tokens(r) / cost(r),  r in 1..width

with cost(r) the measured round time when r rows were verified. Where a verify
row costs next to nothing (a GPU at these sizes), every row is verified; where
rows cost (a CPU's matrix products), a round with an unsure draft stops early.
Which drafts are verified never changes which tokens are chosen, so output
stays byte-identical to classic decode.
No MLX here: the scheduler and the round loop feed it numbers.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

DECAY = 0.995  # per observed round: the acceptance counts' memory is ~200 rounds
SAMPLES = 5  # step times kept per (width, batch size)
REPROBE = 16  # steps between re-measurements of the stalest width

K = TypeVar("K", bound=Hashable)


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
    reason: str  # "single" | "explore" | "reprobe" | "goodput"
    expected: dict[int, float] = field(default_factory=dict)  # width -> tokens/s estimate


class StepCosts(Generic[K]):
    """The last SAMPLES wall times of each kind of step (a key), their median as its
    cost, and when each was last measured; `unmeasured` and `stalest` say what to
    measure next."""

    def __init__(self) -> None:
        self.times: dict[K, deque[float]] = {}
        self.measured_at: dict[K, int] = {}

    def observe(self, key: K, seconds: float, step: int) -> None:
        self.times.setdefault(key, deque(maxlen=SAMPLES)).append(seconds)
        self.measured_at[key] = step

    def cost(self, key: K) -> float:
        return statistics.median(self.times[key])

    def unmeasured(self, keys: list[K], samples: int = 1) -> list[K]:
        """The keys measured fewer than `samples` times."""
        return [key for key in keys if len(self.times.get(key, ())) < samples]

    def stalest(self, keys: list[K]) -> K:
        return min(keys, key=self.measured_at.__getitem__)


class WidthControl:
    def __init__(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self.widths = candidate_widths(ceiling)
        # reached[k]: decayed count of rounds that drafted position k (1-based);
        # accepted[k]: of those, rounds whose first k drafts were all accepted.
        self.reached = [0.0] * ceiling
        self.accepted = [0.0] * ceiling
        self.costs: StepCosts[tuple[int, int]] = StepCosts()
        self.steps = 0

    def acceptance(self, k: int) -> float:
        """P(the first k drafts are accepted), with a weak prior of 1/2 per position."""
        return (self.accepted[k] + 0.5) / (self.reached[k] + 1.0)

    def expected_tokens(self, width: int) -> float:
        """Tokens one request emits per round at `width`."""
        return 1.0 + sum(self.acceptance(k) for k in range(1, width))

    def choose(self, batch: int) -> Choice:
        self.steps += 1
        if batch <= 1 or self.ceiling <= 1:
            return Choice(self.ceiling, "single")
        keys = [(w, batch) for w in self.widths]
        unmeasured = self.costs.unmeasured(keys)
        if unmeasured:
            return Choice(unmeasured[0][0], "explore")
        if self.steps % REPROBE == 0:
            return Choice(self.costs.stalest(keys)[0], "reprobe")
        expected = {w: batch * self.expected_tokens(w) / self.cost(w, batch) for w in self.widths}
        return Choice(max(expected, key=expected.__getitem__), "goodput", expected)

    def cost(self, width: int, batch: int) -> float:
        return self.costs.cost((width, batch))

    def observe_step(self, width: int, batch: int, seconds: float) -> None:
        self.costs.observe((width, batch), seconds, self.steps)

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


def expected_tokens(confidences: list[float]) -> list[float]:
    """tokens(r) for r = 1 .. len(confidences) + 1: one token of the target's own, plus
    each draft weighted by the chance that it and every draft before it are accepted."""
    tokens, chance = [1.0], 1.0
    for confidence in confidences:
        chance *= confidence
        tokens.append(tokens[-1] + chance)
    return tokens


class RowControl:
    """Per round of a lone greedy request: how many of the block's rows to verify."""

    def __init__(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self.rows = list(range(1, ceiling + 1))
        self.costs: StepCosts[int] = StepCosts()
        self.rounds = 0

    def choose(self, confidences: list[float]) -> Choice:
        """confidences: the drafter's probability for each of its ceiling - 1 drafts."""
        self.rounds += 1
        # Three samples each before choosing: the median then sets aside one cold round.
        unmeasured = self.costs.unmeasured(self.rows, samples=3)
        if unmeasured:
            return Choice(unmeasured[-1], "explore")
        if self.rounds % REPROBE == 0:
            return Choice(self.costs.stalest(self.rows), "reprobe")
        tokens = expected_tokens(confidences[: self.ceiling - 1])
        expected = {r: tokens[r - 1] / self.costs.cost(r) for r in self.rows}
        return Choice(max(expected, key=expected.__getitem__), "goodput", expected)

    def observe_round(self, rows: int, seconds: float) -> None:
        self.costs.observe(rows, seconds, self.rounds)
