"""Acceptance rules: greedy prefix matching, and speculative sampling that
reproduces the target's distribution.

The statistical tests draw drafts from q with a seeded numpy generator, run
accept_sampled with a seeded TokenChooser, and compare the emitted tokens'
counts with the target distribution p by Pearson's chi-square test
(scipy.stats.chisquare) over the cells with p > 0, at significance 1e-3;
cells with p = 0 must stay empty. Seeds are fixed, so the outcome is
deterministic; a correct rule fails a given seed with probability 1e-3 per
test. To show the test has power, the same counts must also reject q (what
"always accept the draft" would produce) with p-value < 1e-6.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from scipy.stats import chisquare

from drafter.acceptance import accept_greedy, accept_sampled
from drafter.sampling import SamplingParams, TokenChooser

ALPHA = 1e-3
V = 8

PEAKED = [0.30, 0.20, 0.15, 0.10, 0.10, 0.07, 0.05, 0.03]
REVERSED = PEAKED[::-1]
UNIFORM = [1 / V] * V
LOW_HALF = [0.25, 0.25, 0.25, 0.25, 0, 0, 0, 0]
HIGH_HALF = [0, 0, 0, 0, 0.4, 0.3, 0.2, 0.1]  # zeros as top_p leaves them
TWO_TOKENS = [0.5, 0.5, 0, 0, 0, 0, 0, 0]

PAIRS = {  # name: (p target, q draft)
    "q uniform, p peaked": (PEAKED, UNIFORM),
    "overlapping, reversed": (REVERSED, PEAKED),
    "disjoint supports": (HIGH_HALF, LOW_HALF),
    "q misses most of p's support": (UNIFORM, TWO_TOKENS),
    "q equals p": (PEAKED, PEAKED),
}


def logprobs(*rows: list[float]) -> mx.array:
    return mx.log(mx.array(rows, dtype=mx.float32))


def chooser(seed: int) -> TokenChooser:
    return TokenChooser(SamplingParams(temperature=1.0, seed=seed))


def assert_distributed_as(counts: np.ndarray, p: list[float], label: str) -> None:
    p_arr = np.asarray(p)
    support = p_arr > 0
    assert counts[~support].sum() == 0, f"{label}: tokens with p = 0 were emitted"
    expected = p_arr[support] / p_arr[support].sum() * counts.sum()
    result = chisquare(counts[support], expected)
    assert result.pvalue > ALPHA, f"{label}: counts {counts.tolist()} vs p, p-value {result.pvalue}"


def rejects(counts: np.ndarray, q: list[float]) -> bool:
    """True when the counts are clearly not drawn from q."""
    q_arr = np.asarray(q)
    if counts[q_arr == 0].sum() > 0:
        return True
    expected = q_arr[q_arr > 0] * counts.sum()
    return chisquare(counts[q_arr > 0], expected).pvalue < 1e-6


def test_greedy_accepts_the_longest_matching_prefix() -> None:
    assert accept_greedy([5, 6, 7, 8], [5, 6, 9]) == 2
    assert accept_greedy([5, 6, 7, 8], [5, 9, 7]) == 1  # a later match does not count


def test_greedy_accepts_every_draft_when_all_match() -> None:
    assert accept_greedy([1, 2, 3, 4], [1, 2, 3]) == 3


def test_greedy_accepts_nothing_when_the_first_draft_differs() -> None:
    assert accept_greedy([1, 2, 3], [2, 2]) == 0


def test_greedy_with_no_drafts_accepts_nothing() -> None:
    assert accept_greedy([4], []) == 0


def test_sampled_rejects_row_counts_that_do_not_fit_the_drafts() -> None:
    with pytest.raises(ValueError, match="2 drafts need 3 target rows"):
        accept_sampled(logprobs(UNIFORM, UNIFORM), logprobs(UNIFORM, UNIFORM), [0, 1], chooser(0))


def test_sampled_never_accepts_a_draft_the_target_rules_out() -> None:
    target = logprobs(HIGH_HALF, HIGH_HALF)
    for seed in range(20):
        n, token = accept_sampled(target, logprobs(LOW_HALF), [seed % 4], chooser(seed))
        assert n == 0 and token >= 4


def test_sampled_always_accepts_drafts_the_target_likes_at_least_as_much() -> None:
    target = logprobs(PEAKED, PEAKED, PEAKED)
    for seed in range(20):
        n, _ = accept_sampled(target, logprobs(UNIFORM, UNIFORM), [0, 1], chooser(seed))
        assert n == 2  # p(0) = .3 and p(1) = .2 both exceed q = .125


def test_the_same_seed_gives_the_same_rounds() -> None:
    target, draft = logprobs(PEAKED, PEAKED, PEAKED), logprobs(UNIFORM, UNIFORM)

    def rounds(seed: int) -> list[tuple[int, int]]:
        choose = chooser(seed)
        return [accept_sampled(target, draft, [7, 6], choose) for _ in range(30)]

    assert rounds(9) == rounds(9)
    assert rounds(9) != rounds(10)


@pytest.mark.parametrize("name", list(PAIRS))
def test_one_draft_rounds_emit_tokens_distributed_as_the_target(name: str) -> None:
    p, q = PAIRS[name]
    n_samples = 4000
    rng = np.random.default_rng(1)
    choose = chooser(2)
    target, draft = logprobs(p, UNIFORM), logprobs(q)
    first = np.zeros(V, dtype=int)
    for _ in range(n_samples):
        d = int(rng.choice(V, p=q))
        n, token = accept_sampled(target, draft, [d], choose)
        first[d if n == 1 else token] += 1
    assert_distributed_as(first, p, name)
    if p != q:
        assert rejects(first, q), f"{name}: the test cannot tell p from q"


def test_multi_draft_rounds_emit_a_stream_distributed_as_the_target() -> None:
    """Width 4 (3 drafts a round), a target whose distribution depends on the
    absolute position only: the emitted stream must be independent draws
    p_0, p_1, p_2, ... whatever the round boundaries. Checks the marginals of
    the first three positions and the joint of the first two (p_0 x p_1)."""
    targets = [PEAKED, HIGH_HALF, REVERSED, UNIFORM]
    drafters = [UNIFORM, LOW_HALF, PEAKED, TWO_TOKENS]
    width, length, n_streams = 4, 3, 5000
    # A round starting at stream position s covers positions s .. s+width-1.
    phases = [[(s + i) % len(targets) for i in range(width)] for s in range(len(targets))]
    target_rows = [logprobs(*[targets[k] for k in at]) for at in phases]
    draft_rows = [logprobs(*[drafters[k] for k in at[:-1]]) for at in phases]
    rng = np.random.default_rng(3)
    choose = chooser(4)
    streams = np.zeros((n_streams, length), dtype=int)
    for s in range(n_streams):
        stream: list[int] = []
        while len(stream) < length:
            phase = len(stream) % len(targets)
            drafts = [int(rng.choice(V, p=drafters[k])) for k in phases[phase][:-1]]
            n, token = accept_sampled(target_rows[phase], draft_rows[phase], drafts, choose)
            stream += drafts[:n] + [token]
        streams[s] = stream[:length]
    for position in range(length):
        counts = np.bincount(streams[:, position], minlength=V)
        assert_distributed_as(counts, targets[position], f"position {position}")
    joint = np.bincount(streams[:, 0] * V + streams[:, 1], minlength=V * V)
    assert_distributed_as(joint, np.outer(targets[0], targets[1]).ravel().tolist(), "joint 0,1")
