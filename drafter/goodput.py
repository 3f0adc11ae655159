"""Per batch step: how many rows to verify per request, from what was measured.

Speculation pays when a round's extra rows cost less than the tokens they
yield. One stream has idle hardware to spend on them; a full batch may not
(vllm#42505, llama.cpp#27342 saw speculation lose as concurrency grew). So the
process keeps two measurements and picks, per step, the width with the most
expected tokens per second:

    tokens(w)  = mean over the step's requests of 1 + sum_{k=1}^{w-1} P_r(first k accepted)
    cost(w, B) = B * the measured wall time per request of a step at width w, at
                 batch sizes of B's size class (1, 2, 3-4, 5-8, ...)
    width      = argmax_w tokens(w) / cost(w, B),  w in {1, 2, 4, ..., ceiling},
                 and 1 unless that promises MARGIN more than a classic step (SWITCH
                 more while the size class decodes classically)

Width 1 is a classic step; a lone request's is pipelined as a classic server's is
(drafter/batch.py), so its cost is the real classic cost. P_r is the request's own
acceptance, decayed over its recent rounds and starting from the pooled estimate of
every request: a request whose drafts do not pay is decoded classically, alone or in
a batch of such requests, and comes back to speculation when a re-measurement finds
its drafts accepted again. Costs are the mean of the last `SAMPLES` steps per
(width, size class) less the slowest one: one slow step (a page fault, a collection)
cannot rule a width out, and pipelined classic steps, whose time falls unevenly
between them (a prefill between two steps waits for the queued forward, the step
after a change of members runs two forwards), are read at what they cost together;
the classic step right after a wide one restarts the pipeline, a switch's cost (SWITCH
covers it), and is never a classic cost: classic decode is measured by the pipelined
step after it, so measuring it after wide steps takes two classic steps.
A lone request tries each width once, widest first (the startup-resolved width is
the default, see DESIGN.md). A batch measures classic decode first and its wide widths
as re-measurements: a wide step in a batch takes in every context row kept since its
requests last drafted and meets new shapes, so a batch's first wide steps are the
costliest steps the server runs, and under load classic decode is the safe default.
Every REPROBE steps at a size class its least recently measured width (one never
measured first) is tried; while re-measuring changes nothing, a size class waits twice
as long each time, up to MAX_REPROBE of its steps. A re-measurement that cost more than
a classic step also pushes the next one out until re-measuring has spent at most
REPROBE_SHARE of the size class's classic decode time, up to MAX_PACED steps; its cost
includes the classic step after it, which restarts the pipeline and waits for what the
wide step left queued on the device. One whose step cost more than `width` classic steps
could not pay even with every draft accepted: the next waits MAX_PACED steps, the fewest
wide steps that still let the control see costs fall.
No MLX here: the scheduler feeds it numbers.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

DECAY = 0.995  # per observed round: the pooled counts' memory is ~200 rounds
REQUEST_DECAY = 0.9  # per round of that request: its own counts' memory is ~10 rounds
PRIOR = 4.0  # rounds of the pooled estimate a request's own counts start from
SAMPLES = 8  # step times kept per (width, size class)
REPROBE = 16  # steps between re-measurements of the stalest width, at first
MAX_REPROBE = 256  # ... and at most, while re-measuring changes nothing
REPROBE_SHARE = 0.02  # what re-measuring may cost beyond classic steps, of decode time
MAX_PACED = 2048  # the longest wait that a costly re-measurement sets
# What speculation must promise over a classic step to be chosen: the estimates are
# means of a few noisy steps, and a classic step is the cheaper one to get wrong.
MARGIN = 1.05
# ... to be resumed while a size class decodes classically: a switch costs what the
# steady steps' costs do not show (the first wide step takes in every context row kept
# since the requests last drafted, and the classic pipeline restarts after it), so
# estimates that sit near a classic step's must not flip the class back and forth.
SWITCH = 1.2


def candidate_widths(ceiling: int) -> list[int]:
    """1, then powers of two below the ceiling, then the ceiling."""
    widths, w = [1], 2
    while w < ceiling:
        widths.append(w)
        w *= 2
    return widths + ([ceiling] if ceiling > 1 else [])


def size_class(batch: int) -> int:
    """The power of two at or above `batch`: steps of 5 to 8 requests share costs."""
    size = 1
    while size < batch:
        size *= 2
    return size


@dataclass
class Choice:
    width: int
    reason: str  # "explore" | "reprobe" | "goodput" | "seeded" | "classic"
    expected: dict[int, float] = field(default_factory=dict)  # width -> tokens/s estimate


class Acceptance:
    """Decayed counts per draft position k (1-based): rounds that drafted it (`reached`)
    and rounds whose first k drafts were all accepted (`accepted`)."""

    def __init__(self, ceiling: int, decay: float) -> None:
        self.decay = decay
        self.reached = [0.0] * ceiling
        self.accepted = [0.0] * ceiling

    def observe(self, width: int, accepted: int) -> None:
        for k in range(1, len(self.reached)):
            self.reached[k] *= self.decay
            self.accepted[k] *= self.decay
        for k in range(1, width):
            self.reached[k] += 1.0
            if accepted >= k:
                self.accepted[k] += 1.0

    def rate(self, k: int, prior: float, weight: float) -> float:
        """P(the first k drafts are accepted): the counts over `weight` rounds of `prior`."""
        return (self.accepted[k] + weight * prior) / (self.reached[k] + weight)


@dataclass
class Reprobe:
    """When a size class next re-measures its stalest width, and how long it waits,
    counted in the class's own steps: a batch that passes through a class now and then
    (filling up, draining) does not re-measure at every visit."""

    interval: int = REPROBE
    due: int = REPROBE
    best: int | None = None  # the goodput choice when it last re-measured
    steps: int = 0  # steps run at this size class


class WidthControl:
    def __init__(self, ceiling: int) -> None:
        self.ceiling = ceiling
        self.widths = candidate_widths(ceiling)
        self.pooled = Acceptance(ceiling, DECAY)
        self.requests: dict[Hashable, Acceptance] = {}
        self.times: dict[tuple[int, int], deque[float]] = {}  # seconds per request
        self.measured_at: dict[tuple[int, int], int] = {}
        self.reprobes: dict[int, Reprobe] = {}
        self.speculating: dict[int, bool] = {}  # size class -> its last goodput choice was wide
        self.steps = 0
        self.last_width = 1  # the width the last step ran
        self.probe: tuple[int, int, float] | None = None  # the last step, a wide re-measurement

    def pooled_rates(self) -> list[float]:
        """P(the first k drafts are accepted) over every request, k = 1 .. ceiling - 1
        (entry 0 unused), with a weak prior of 1/2 per position."""
        return [self.pooled.rate(k, 0.5, 1.0) for k in range(self.ceiling)]

    def tokens_by_width(
        self, request: Hashable | None, pooled: list[float] | None = None
    ) -> list[float]:
        """Tokens one request emits per round at widths 1 .. ceiling (entry w - 1), from
        its own rounds starting from the pooled estimate (`pooled_rates`), or pooled."""
        pooled = self.pooled_rates() if pooled is None else pooled
        own = self.requests.get(request) if request is not None else None
        tokens = [1.0]
        for k in range(1, self.ceiling):
            rate = pooled[k] if own is None else own.rate(k, pooled[k], PRIOR)
            tokens.append(tokens[-1] + rate)
        return tokens

    def expected_tokens(self, width: int, request: Hashable | None = None) -> float:
        """Tokens one request emits per round at `width`."""
        return self.tokens_by_width(request)[width - 1]

    def choose(self, requests: Sequence[Hashable], seeded: bool = False) -> Choice:
        """The step's width for these requests. seeded: a seeded sampled request is in
        the step; it runs at the ceiling, whatever was measured, so its random draws
        repeat."""
        self.steps += 1
        if seeded:
            return Choice(self.ceiling, "seeded")
        if self.ceiling <= 1:
            return Choice(1, "classic")
        size = size_class(len(requests))
        reprobe = self.reprobes.setdefault(size, Reprobe())
        reprobe.steps += 1
        unmeasured = [w for w in reversed(self.widths) if (w, size) not in self.times]
        if unmeasured and (size == 1 or 1 in unmeasured):  # alone: widest first; batch: classic
            return Choice(unmeasured[0] if size == 1 else 1, "explore")
        pooled = self.pooled_rates()  # once a step, each request's sums once
        per_request = [self.tokens_by_width(r, pooled) for r in requests]
        batch = len(requests)
        expected = {
            w: sum(t[w - 1] for t in per_request) / (batch * self.cost(w, size))
            for w in self.widths
            if w not in unmeasured
        }
        best = max(expected, key=expected.__getitem__)
        if expected[best] < (MARGIN if self.speculating.get(size) else SWITCH) * expected[1]:
            best = 1
        if reprobe.steps >= reprobe.due:
            reprobe.interval = (
                min(2 * reprobe.interval, MAX_REPROBE) if best == reprobe.best else REPROBE
            )
            reprobe.due, reprobe.best = reprobe.steps + reprobe.interval, best
            if unmeasured:  # a batch's wide widths are first measured here
                return Choice(unmeasured[0], "reprobe", expected)
            stalest = min(self.widths, key=lambda w: self.measured_at[(w, size)])
            return Choice(stalest, "reprobe", expected)
        self.speculating[size] = best > 1
        return Choice(best, "goodput", expected)

    def costs(self, size: int) -> dict[int, float]:
        """Seconds per request of a step at each width measured at size class `size`."""
        return {w: self.cost(w, size) for w in self.widths if (w, size) in self.times}

    def cost(self, width: int, size: int) -> float:
        """Seconds per request of a step at `width`, at batch sizes of class `size`: the
        mean of its recent steps but the slowest (a median would read pipelined classic
        steps, alternately near zero and double, as either)."""
        times = sorted(self.times[(width, size)])
        return statistics.fmean(times[:-1] if len(times) > 2 else times)

    def observe_step(
        self, width: int, batch: int, seconds: float, asked: Choice | None = None
    ) -> None:
        """A step of `batch` requests ran at `width` in `seconds`. asked: the choice it
        was run for; a re-measurement that ran another width (a batch's classic step in
        flight is taken first, drafter/batch.py), or one that only restarted
        the pipeline, is asked for again at the next step."""
        key = (width, size_class(batch))
        # The classic step after a wide one restarts the pipeline (it queues two
        # forwards): the switch's cost, which SWITCH covers, not classic decode's.
        # Classic is measured by the pipelined step after it.
        restart, self.last_width = width == 1 and self.last_width > 1, width
        probe, self.probe = self.probe, None
        if not restart:
            self.times.setdefault(key, deque(maxlen=SAMPLES)).append(seconds / batch)
            self.measured_at[key] = self.steps
        elif probe is not None and key[1] == probe[0]:  # the wide re-measurement's tail
            self.pace(probe[0], probe[1], probe[2] + seconds - batch * self.cost(1, key[1]))
        if asked is None or asked.reason != "reprobe":
            return
        if restart or asked.width != width:  # it measured nothing it asked for
            reprobe = self.reprobes[key[1]]
            reprobe.due = reprobe.steps + 1
        elif width > 1:
            self.pace(key[1], batch, seconds, width)
            self.probe = (key[1], batch, seconds)

    def pace(self, size: int, batch: int, seconds: float, width: int | None = None) -> None:
        """After a wide re-measurement that took `seconds`: the next one waits until its
        cost beyond a classic step is REPROBE_SHARE of the classic steps run since, or
        MAX_PACED where its `width` rows cost more than `width` classic steps (no
        acceptance could make it pay)."""
        classic = batch * self.cost(1, size)  # seconds of a classic step at this batch
        extra = seconds - classic
        if extra <= 0 or classic <= 0:
            return
        hopeless = width is not None and seconds > width * classic
        wait = (
            MAX_PACED if hopeless else min(math.ceil(extra / (REPROBE_SHARE * classic)), MAX_PACED)
        )
        reprobe = self.reprobes[size]
        reprobe.due = max(reprobe.due, reprobe.steps + wait)

    def observe_round(self, width: int, accepted: int, request: Hashable | None = None) -> None:
        """One request's round: `accepted` of its width - 1 drafts were kept."""
        if width <= 1:
            return
        self.pooled.observe(width, accepted)
        if request is not None:
            own = self.requests.setdefault(request, Acceptance(self.ceiling, REQUEST_DECAY))
            own.observe(width, accepted)

    def forget(self, request: Hashable) -> None:
        """The request ended: its own counts go."""
        self.requests.pop(request, None)
