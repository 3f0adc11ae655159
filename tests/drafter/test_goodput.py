"""The per-step width choice: measured cost and acceptance decide, a lone sequence keeps
the resolved width, and every width is measured before it can be ruled out."""

from __future__ import annotations

from drafter.goodput import REPROBE, Choice, WidthControl, candidate_widths


def measured(control: WidthControl, batch: int, cost: dict[int, float]) -> None:
    for _ in control.widths:
        choice = control.choose(batch)
        assert choice.reason == "explore"
        control.observe_step(choice.width, batch, cost[choice.width])


def test_candidates_are_classic_powers_of_two_and_the_ceiling() -> None:
    assert candidate_widths(1) == [1]
    assert candidate_widths(4) == [1, 2, 4]
    assert candidate_widths(6) == [1, 2, 4, 6]
    assert candidate_widths(16) == [1, 2, 4, 8, 16]


def test_a_lone_sequence_runs_at_the_resolved_width() -> None:
    control = WidthControl(8)
    choice = control.choose(1)
    assert (choice.width, choice.reason) == (8, "single")


def test_every_width_is_measured_at_a_batch_size_before_goodput_decides() -> None:
    control = WidthControl(4)
    seen = set()
    for _ in control.widths:
        choice = control.choose(3)
        seen.add(choice.width)
        control.observe_step(choice.width, 3, 0.1)
    assert seen == {1, 2, 4}
    assert control.choose(3).reason == "goodput"
    assert control.choose(5).reason == "explore"  # another batch size: measured afresh


def test_speculation_is_dropped_when_its_rows_cost_more_than_they_yield() -> None:
    control = WidthControl(4)
    measured(control, 8, {1: 0.10, 2: 0.19, 4: 0.38})  # rows cost in proportion
    for _ in range(200):
        control.observe_round(4, 0)  # nothing accepted
    assert control.choose(8).width == 1


def test_speculation_is_kept_when_rows_are_cheap_and_drafts_accepted() -> None:
    control = WidthControl(4)
    measured(control, 2, {1: 0.10, 2: 0.105, 4: 0.11})  # rows nearly free
    for _ in range(200):
        control.observe_round(4, 3)  # every draft accepted
    choice = control.choose(2)
    assert choice.width == 4
    assert choice.expected[4] > 3 * choice.expected[1]


def test_the_stalest_width_is_measured_again_periodically() -> None:
    control = WidthControl(4)
    measured(control, 2, {1: 0.1, 2: 0.2, 4: 0.4})
    reasons = []
    for _ in range(REPROBE):
        choice = control.choose(2)
        reasons.append(choice.reason)
        control.observe_step(choice.width, 2, 0.1 * choice.width)
    assert "reprobe" in reasons


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
    measured(control, 8, {1: 0.10, 2: 0.2, 4: 0.4})
    for _ in range(2):
        control.observe_step(1, 8, 0.10)
    control.observe_step(1, 8, 5.0)  # one stall
    assert control.choose(8).width == 1


def test_a_seeded_step_runs_at_the_ceiling_whatever_was_measured() -> None:
    control = WidthControl(8)
    for _ in range(20):
        choice = control.choose(4)
        control.observe_step(choice.width, 4, 0.01 * choice.width)
    assert control.choose(4, seeded=True) == Choice(8, "seeded")
