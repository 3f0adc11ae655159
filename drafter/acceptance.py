"""Which drafted tokens a round keeps, and the token that follows them.

Greedy (temperature 0): keep the longest prefix where each draft equals the
target's choice for its row; the target's choice after it is the next token.

Sampled (temperature > 0), the speculative sampling rule of Leviathan et al.
and Chen et al. (2023): with p the target's and q the drafter's sampling
distribution at a drafted position, accept draft d with probability
min(1, p(d)/q(d)); at the first rejection draw the next token from
norm(max(0, p - q)); if every draft is accepted draw a bonus token from the
target's last row. Each emitted token is then distributed exactly as p
(given that each draft was drawn from its q).
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from drafter.sampling import TokenChooser


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest prefix with a[i] == b[i]."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def accept_greedy(target_choice: list[int], drafts: list[int]) -> int:
    """Drafts accepted greedily: as long as each equals the target's own choice."""
    return common_prefix(target_choice, drafts)


def accept_sampled(
    target_logprobs: mx.array,
    draft_logprobs: mx.array,
    drafts: list[int],
    chooser: TokenChooser,
) -> tuple[int, int]:
    """(n_accepted, next_token) for one round, with a single host sync.

    target_logprobs: (B, V) the target's sampling log-probabilities per verify
    row; draft_logprobs: (B-1, V) the drafter's per drafted position; drafts:
    the B-1 drafted ids. Randomness comes from `chooser`'s keys only.
    """
    n_drafts = len(drafts)
    if target_logprobs.shape[0] != n_drafts + 1 or draft_logprobs.shape[0] != n_drafts:
        raise ValueError(
            f"{n_drafts} drafts need {n_drafts + 1} target rows and {n_drafts} draft rows, "
            f"got {target_logprobs.shape[0]} and {draft_logprobs.shape[0]}"
        )
    target = target_logprobs.astype(mx.float32)
    draft = draft_logprobs.astype(mx.float32)
    rows = mx.arange(n_drafts)
    ids = mx.array(drafts, dtype=mx.int32)
    # u < p/q  <=>  log u < log p - log q; a token with p = 0 is never accepted.
    log_u = mx.log(mx.random.uniform(shape=(n_drafts,), key=chooser.next_key()))
    accepted = log_u < target[rows, ids] - draft[rows, ids]
    # One candidate per row, drawn together so the round needs one sync: row i
    # < B-1 from the residual norm(max(0, p_i - q_i)), the last row from p.
    candidates = mx.random.categorical(
        mx.concatenate([residual_logits(target[:-1], draft), target[-1:]]),
        key=chooser.next_key(),
    )
    mx.eval(accepted, candidates)
    flags = accepted.tolist()
    n = flags.index(False) if False in flags else n_drafts
    return n, candidates[n].item()


def residual_logits(target: mx.array, draft: mx.array) -> mx.array:
    """log max(0, p - q) per row (unnormalised: categorical normalises).

    A rejection implies q(d) > p(d), so some token has p > q and the residual
    is not all zero; should rounding make it so anyway, fall back to p.
    """
    residual = mx.maximum(mx.exp(target) - mx.exp(draft), 0.0)
    empty = mx.sum(residual, axis=-1, keepdims=True) <= 0
    return mx.where(empty, target, mx.log(residual))
