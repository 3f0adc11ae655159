"""The per-step width choice: measured cost and each request's acceptance decide, a
lone request starts at the resolved width, and every width is measured before it can
be ruled out."""

from __future__ import annotations

import statistics

import pytest

from drafter.goodput import (
    MARGIN,
    MAX_PACED,
    MAX_REPROBE,
    REPROBE,
    REPROBE_SHARE,
    SWITCH,
    Choice,
    WidthControl,
    candidate_widths,
    size_class,
)


def measured(control: WidthControl, requests: list[str], cost: dict[int, float]) -> None:
    """Run steps as the control asks until it has measured every width at this size
    class. cost: a step's seconds at each width."""
    size = size_class(len(requests))
    for _ in range(10_000):
        if all((w, size) in control.times for w in control.widths):
            return
        choice = control.choose(requests)
        control.observe_step(choice.width, len(requests), cost[choice.width], choice)
    raise AssertionError("some width was never measured")


def batch(n: int) -> list[str]:
    return [f"r{i}" for i in range(n)]


def test_candidates_are_classic_powers_of_two_and_the_ceiling() -> None:
    assert candidate_widths(1) == [1]
    assert candidate_widths(4) == [1, 2, 4]
    assert candidate_widths(6) == [1, 2, 4, 6]
    assert candidate_widths(16) == [1, 2, 4, 8, 16]


def test_batch_sizes_share_costs_by_power_of_two_class() -> None:
    assert [size_class(b) for b in (1, 2, 3, 4, 5, 8, 9, 32)] == [1, 2, 4, 4, 8, 8, 16, 32]


def test_a_lone_request_starts_at_the_resolved_width() -> None:
    control = WidthControl(8)
    assert control.choose(["a"]) == Choice(8, "explore")


def test_a_lone_request_measures_every_width_before_goodput_decides() -> None:
    control = WidthControl(4)
    seen = []
    for _ in range(len(control.widths) + 1):
        choice = control.choose(["a"])
        seen.append((choice.width, choice.reason))
        control.observe_step(choice.width, 1, 0.1)
    # widest first; classic's first step after them restarts the pipeline
    assert [width for width, _ in seen] == [4, 2, 1, 1]
    assert {reason for _, reason in seen} == {"explore"}
    assert control.choose(["a"]).reason == "goodput"


def test_a_batch_decodes_classically_until_a_wide_width_is_measured() -> None:
    """Classic first; each wide width is measured as a re-measurement, paced by its cost
    (a step at 4 rows costs 3 classic steps more: 0.3 / (REPROBE_SHARE x 0.1) steps)."""
    control = WidthControl(4)
    cost = {1: 0.1, 2: 0.2, 4: 0.4}
    seen = []
    for step in range(400):
        choice = control.choose(batch(3))
        control.observe_step(choice.width, 3, cost[choice.width], choice)
        if choice.width > 1 or choice.reason != "goodput":
            seen.append((step, choice.width, choice.reason))
    assert seen[0] == (0, 1, "explore")
    assert seen[1] == (REPROBE - 1, 4, "reprobe")  # widest first, after REPROBE steps
    assert seen[2] == (REPROBE - 1 + 0.3 / (REPROBE_SHARE * 0.1) + 2, 2, "reprobe")
    assert all(reason == "reprobe" for _, width, reason in seen[1:])
    assert control.choose(batch(4)).reason == "goodput"  # 3 and 4 share a class
    assert control.choose(batch(5)) == Choice(1, "explore")  # another class: measured afresh


def test_a_re_measurement_is_charged_the_device_work_it_left_queued() -> None:
    """The classic step after a wide re-measurement restarts the pipeline and waits for
    whatever the wide step left queued: its time beyond a classic step pushes the next
    re-measurement out as the wide step's own time does."""
    cost = {1: 0.1, 2: 0.2, 4: 0.2}

    def second_wide_at(restart_s: float) -> int:
        control = WidthControl(4)
        for _ in range(50):  # drafts refused: classic stays the choice
            control.observe_round(4, 0)
        wide = []
        for step in range(2000):
            choice = control.choose(batch(3))
            after_wide = choice.width == 1 and control.last_width > 1
            seconds = restart_s if after_wide else cost[choice.width]
            control.observe_step(choice.width, 3, seconds, choice)
            if choice.width > 1:
                wide.append(step)
        return wide[1] - wide[0]

    # nothing left queued: the wait covers the wide step's 0.1 s beyond a classic step
    assert 0.1 / (REPROBE_SHARE * 0.1) <= second_wide_at(0.1) <= 0.1 / (REPROBE_SHARE * 0.1) + 2
    # 1 s left queued, waited for by the step after it: the wait covers 1.1 s
    assert second_wide_at(1.1) >= 1.1 / (REPROBE_SHARE * 0.1)


def test_speculation_is_dropped_when_its_rows_cost_more_than_they_yield() -> None:
    control = WidthControl(4)
    measured(control, batch(8), {1: 0.10, 2: 0.19, 4: 0.38})  # rows cost in proportion
    for _ in range(200):
        control.observe_round(4, 0)  # nothing accepted
    assert control.choose(batch(8)).width == 1


def test_speculation_is_kept_when_rows_are_cheap_and_drafts_accepted() -> None:
    control = WidthControl(4)
    measured(control, batch(2), {1: 0.10, 2: 0.105, 4: 0.11})  # rows nearly free
    for _ in range(200):
        control.observe_round(4, 3)  # every draft accepted
    choice = control.choose(batch(2))
    assert choice.width == 4
    assert choice.expected[4] > 3 * choice.expected[1]
    assert 70 < choice.expected[4] < 73  # tokens per second: 2 x ~3.98 tokens in 0.11 s


def test_a_request_whose_drafts_do_not_pay_decodes_classically_and_comes_back() -> None:
    control = WidthControl(4)
    measured(control, ["good"], {1: 0.010, 2: 0.016, 4: 0.018})
    for _ in range(50):
        control.observe_round(4, 3, "good")
        control.observe_round(4, 0, "poor")
    assert control.choose(["good"]).width == 4
    assert control.choose(["poor"]).width == 1  # off for this request only
    for _ in range(20):  # its re-measured rounds find its drafts accepted again
        control.observe_round(4, 3, "poor")
    assert control.choose(["poor"]).width == 4
    control.forget("poor")
    assert "poor" not in control.requests


def test_a_new_request_starts_from_every_requests_acceptance() -> None:
    control = WidthControl(4)
    for _ in range(100):
        control.observe_round(4, 3, "old")
    assert control.expected_tokens(4, "new") == control.expected_tokens(4) > 3.5


def test_re_measuring_backs_off_while_it_changes_nothing() -> None:
    control = WidthControl(4)
    measured(control, batch(2), {1: 0.1, 2: 0.2, 4: 0.4})
    at = []
    for step in range(600):
        choice = control.choose(batch(2))
        if choice.reason == "reprobe":
            at.append(step)
        control.observe_step(choice.width, 2, 0.1 * choice.width)
    gaps = [b - a for a, b in zip(at, at[1:], strict=False)]
    assert gaps[:3] == [4 * REPROBE, 8 * REPROBE, MAX_REPROBE]  # measuring was 2 doublings
    assert max(gaps) == MAX_REPROBE


def reprobe_gaps(
    control: WidthControl, requests: list[str], steps: int, wide_s: dict[int, float]
) -> list[tuple[int, int]]:
    """Run `steps` steps at 0.1 s a classic step; a wide re-measurement at width w takes
    `wide_s[w]`. Each gap between re-measurements, with the width before it."""
    at = []
    for step in range(steps):
        choice = control.choose(requests)
        seconds = wide_s[choice.width] if choice.width > 1 else 0.1
        if choice.reason == "reprobe" and choice.width > 1:
            at.append((step, choice.width))
        control.observe_step(choice.width, len(requests), seconds, choice)
    return [(b - a, width) for (a, width), (b, _) in zip(at, at[1:], strict=False)]


def test_a_costly_re_measurement_waits_until_classic_steps_cover_it() -> None:
    """A wide re-measurement that costs 7.9 classic steps (width 8, so it could still
    pay): the next one comes only after enough classic steps that it was REPROBE_SHARE
    of their time, beyond the cadence a cheap one keeps."""
    control = WidthControl(8)
    cost = {2: 0.19, 4: 0.39, 8: 0.79}
    measured(control, batch(8), {1: 0.1, **cost})
    gaps = reprobe_gaps(control, batch(8), 4000, cost)
    after_8 = [gap for gap, width in gaps if width == 8]
    wait = (0.79 - 0.1) / (REPROBE_SHARE * 0.1)
    assert wait > MAX_REPROBE and after_8 and min(after_8) >= wait
    assert max(gap for gap, _ in gaps) <= MAX_PACED + REPROBE


def test_a_width_no_acceptance_could_pay_for_is_re_measured_least_often() -> None:
    """A wide step that costs more than `width` classic steps loses even with every draft
    accepted: the next re-measurement waits MAX_PACED steps, where one that could pay
    keeps the cadence of re-measuring."""
    control = WidthControl(2)
    measured(control, batch(8), {1: 0.1, 2: 0.25})
    hopeless = reprobe_gaps(control, batch(8), 5000, {2: 0.25})  # 2.5 classic steps
    assert hopeless and min(gap for gap, _ in hopeless) >= MAX_PACED
    control = WidthControl(2)
    measured(control, batch(8), {1: 0.1, 2: 0.19})
    could_pay = reprobe_gaps(control, batch(8), 5000, {2: 0.19})  # 1.9 classic steps
    assert could_pay and max(gap for gap, _ in could_pay) <= MAX_REPROBE + REPROBE


def test_a_re_measurement_at_a_classic_steps_cost_keeps_its_cadence() -> None:
    control = WidthControl(4)
    measured(control, batch(8), {1: 0.1, 2: 0.1, 4: 0.1})
    for _ in range(50):  # drafts refused: classic stays the choice
        control.observe_round(4, 0)
    gaps = reprobe_gaps(control, batch(8), 600, {2: 0.1, 4: 0.1})
    assert min(gap for gap, _ in gaps) <= 2 * REPROBE


def steps_until_reprobe(control: WidthControl, requests: list[str]) -> int:
    """Steps at 0.1 s a row until a re-measurement is chosen, that one included (it
    runs too)."""
    steps = 0
    while True:
        choice = control.choose(requests)
        steps += 1
        control.observe_step(choice.width, len(requests), 0.1 * choice.width, choice)
        if choice.reason == "reprobe":
            return steps


def test_re_measuring_counts_the_size_class_own_steps() -> None:
    """A batch that fills up or drains passes through size classes for a few steps: a
    class does not re-measure on arriving because other classes ran many steps."""
    control = WidthControl(4)
    measured(control, batch(8), {1: 0.1, 2: 0.4, 4: 0.8})
    measured(control, batch(1), {1: 0.1, 2: 0.15, 4: 0.2})
    steps_until_reprobe(control, batch(8))
    for _ in range(2000):  # alone a long while
        choice = control.choose(batch(1))
        control.observe_step(choice.width, 1, 0.1 * choice.width, choice)
    # back at class 8: its next re-measurement after its own steps
    assert steps_until_reprobe(control, batch(8)) >= REPROBE


def test_a_re_measurement_that_ran_classic_is_asked_for_again() -> None:
    """A batch's classic step in flight is taken before any other width runs: the
    re-measurement that step was chosen for comes again at the next step."""
    control = WidthControl(4)
    measured(control, batch(2), {1: 0.1, 2: 0.2, 4: 0.4})
    choice = control.choose(batch(2))
    while choice.reason != "reprobe":
        control.observe_step(choice.width, 2, 0.1 * choice.width, choice)
        choice = control.choose(batch(2))
    assert choice.width != 1
    control.observe_step(1, 2, 0.1, choice)  # it ran classic
    again = control.choose(batch(2))
    assert (again.reason, again.width) == ("reprobe", choice.width)
    control.observe_step(again.width, 2, 0.1 * again.width, again)
    assert control.choose(batch(2)).reason == "goodput"


def test_acceptance_decays_toward_recent_rounds() -> None:
    control = WidthControl(4)
    for _ in range(500):
        control.observe_round(4, 3)
    high = control.expected_tokens(4)
    for _ in range(500):
        control.observe_round(4, 0)
    assert control.expected_tokens(4) < 1.3 < 3.5 < high  # ~1.23 and ~3.98


def test_one_slow_step_does_not_rule_a_width_out() -> None:
    control = WidthControl(4)
    measured(control, batch(8), {1: 0.10, 2: 0.2, 4: 0.4})
    for _ in range(2):
        control.observe_step(1, 8, 0.10)
    control.observe_step(1, 8, 5.0)  # one stall
    assert control.choose(batch(8)).width == 1


def test_pipelined_classic_steps_are_costed_together() -> None:
    """Under churn a pipelined classic step's time falls unevenly: near zero when a
    prefill before it already waited for its forward, double after a change of members.
    Their cost is what they take together, not whichever half a median lands on."""
    control = WidthControl(2)
    measured(control, batch(8), {1: 0.08, 2: 0.184})
    for i in range(300):
        control.observe_round(2, 1 if i % 3 else 0)  # 2/3 of the drafts kept
    for step in range(7):  # slow, fast, ...: the last five hold three slow ones
        control.observe_step(1, 8, 0.16 if step % 2 == 0 else 0.016)
    assert statistics.median(list(control.times[(1, 8)])[-5:]) == 0.02  # per request
    choice = control.choose(batch(8))
    assert choice.width == 1  # 1.67 tokens for 2.1x the cost of a classic step


def test_the_classic_step_after_a_wide_one_is_not_a_classic_cost() -> None:
    """It restarts the pipeline (two forwards in one step): counted as a classic step,
    each wide step would raise classic decode's cost and so call for more wide steps."""
    control = WidthControl(2)
    measured(control, batch(8), {1: 0.08, 2: 0.2})
    for _ in range(6):
        control.observe_step(2, 8, 0.2)
        control.observe_step(1, 8, 0.16)  # the restart after it
    assert list(control.times[(1, 8)]) == pytest.approx([0.01] * len(control.times[(1, 8)]))
    control.observe_step(1, 8, 0.096)  # classic after classic counts
    assert control.times[(1, 8)][-1] == pytest.approx(0.012)


def test_classic_is_measured_by_the_step_after_the_restart() -> None:
    """Explored after the wide widths, classic's first step queues two forwards; what
    the control keeps is the pipelined step after it, not double that."""
    control = WidthControl(2)
    assert control.choose(["a"]) == Choice(2, "explore")
    control.observe_step(2, 1, 0.06)
    assert control.choose(["a"]) == Choice(1, "explore")
    control.observe_step(1, 1, 0.08)  # the restart
    assert control.choose(["a"]) == Choice(1, "explore")  # classic is not measured yet
    control.observe_step(1, 1, 0.04)
    assert control.cost(1, 1) == pytest.approx(0.04)


def test_re_measuring_classic_at_a_speculating_class_takes_two_steps() -> None:
    """A class that speculates re-measures classic with a restart and then a pipelined
    step; only the second is its cost, so classic decode's cost does not stay at a
    restart's and speculation is compared with what classic decode really costs."""
    control = WidthControl(2)
    measured(control, ["a"], {1: 0.04, 2: 0.05})
    for _ in range(50):
        control.observe_round(2, 1, "a")  # drafts pay: the class speculates
    classic = []
    for _ in range(400):
        choice = control.choose(["a"])
        if choice.width == 1:
            classic.append(choice.reason)
        restart = choice.width == 1 and control.last_width > 1
        seconds = 0.08 if restart else {1: 0.04, 2: 0.05}[choice.width]
        control.observe_step(choice.width, 1, seconds, choice)
    assert classic.count("goodput") == 0  # 2 tokens for 1.25x: the class speculates
    assert classic and classic.count("reprobe") % 2 == 0  # each re-measurement twice
    assert control.cost(1, 1) == pytest.approx(0.04)


def test_a_seeded_step_runs_at_the_ceiling_whatever_was_measured() -> None:
    control = WidthControl(8)
    for _ in range(20):
        choice = control.choose(batch(4))
        control.observe_step(choice.width, 4, 0.01 * choice.width)
    assert control.choose(batch(4), seeded=True) == Choice(8, "seeded")


def test_without_a_drafter_every_step_is_classic() -> None:
    assert WidthControl(1).choose(batch(3)) == Choice(1, "classic")


def test_speculation_must_promise_a_margin_over_a_classic_step() -> None:
    control = WidthControl(2)
    measured(control, batch(8), {1: 0.100, 2: 0.145})
    for i in range(300):
        control.observe_round(2, i % 2)  # half the drafts kept
    choice = control.choose(batch(8))
    assert 1.0 < choice.expected[2] / choice.expected[1] < 1.05  # ahead on paper, by less
    assert choice.width == 1


def test_a_classic_size_class_resumes_speculation_only_for_a_larger_promise() -> None:
    """Near a classic step's estimate the class keeps what it runs: resuming speculation
    asks SWITCH, staying with it asks MARGIN."""
    control = WidthControl(2)
    measured(control, batch(8), {1: 0.100, 2: 0.175})
    for _ in range(300):
        control.observe_round(2, 1)  # every draft kept: 2 tokens for 1.75x the cost
    first = control.choose(batch(8))
    assert MARGIN < first.expected[2] / first.expected[1] < SWITCH
    assert first.width == 1  # classic so far: not enough to switch
    for _ in range(3):
        control.observe_step(2, 8, 0.150)  # cheaper wide steps now: 2 tokens for 1.5x
    assert control.choose(batch(8)).width == 2  # a promise above SWITCH
    for _ in range(8):
        control.observe_step(2, 8, 0.175)  # back to 1.75x the cost
    choice = control.choose(batch(8))
    assert MARGIN < choice.expected[2] / choice.expected[1] < SWITCH
    assert choice.width == 2  # speculating already: MARGIN keeps it
