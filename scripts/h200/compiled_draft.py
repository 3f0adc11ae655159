"""The drafter's forward in compiled stages (drafter/compiled_draft.py) on the GPU: are
the drafts the same, and does the round get cheaper?

1. Exactness, for each of the 12 held-out prompts: one draft's scores after the prompt's
   prefill, staged and plain, compared bit for bit; then the prompt decoded greedily
   (128 tokens) at width 8 with each drafter: tokens equal to classic decode's, and the
   same accepted count in every round (the same drafts).
2. Round by round (`ab.alternate_rounds`, RUNS runs): "before" (the drafter as written,
   the verify's feed-forward blocks compiled: the CUDA default until now), "staged",
   and "early" (staged, the drafts evaluated asynchronously as soon as they are built).
3. Pass level (`ab.alternate`, n passes): "before" and "staged", with stage times.
argv: n (default 6), runs (default 6). Prints JSON lines and the rounds' lines."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import partial

import mlx.core as mx
from ab import alternate, alternate_rounds, width8_engine

from drafter.decoding import GenerationStats
from drafter.dflash import DFlashDrafter
from drafter.engine import Engine
from drafter.sampling import SamplingParams
from drafter.speculative import Session
from server.tooling.bench import read_prompts_file

N = int(sys.argv[1]) if len(sys.argv) > 1 else 6
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 6
PROMPTS = "server/tooling/heldout_prompts.json"
TOKENS = 128

engine = width8_engine()
assert isinstance(engine.drafter, DFlashDrafter) and engine.drafter.staged is not None
drafter: DFlashDrafter = engine.drafter
drafter.warm(8, engine.attention)
STAGED = drafter.staged
PLAIN_OPEN = Session.open


def early_open(self: Session, *args: object, **kwargs: object) -> object:
    current = PLAIN_OPEN(self, *args, **kwargs)  # type: ignore[arg-type]
    mx.async_eval(current.drafts)
    return current


def use(arm: str) -> None:
    drafter.staged = None if arm == "before" else STAGED
    Session.open = early_open if arm == "early" else PLAIN_OPEN  # type: ignore[method-assign,assignment]


def first_draft(prompt: list[int], arm: str) -> mx.array:
    use(arm)
    session = Session(engine, SamplingParams(), GenerationStats(), True, width=8)
    anchor = session.prefill(prompt, 64)[0].id
    scores = drafter.draft_scores(anchor, session.take_context(), session.draft_cache, 8).scores
    mx.eval(scores)
    return scores


def decode(prompt: list[int], width: int, arm: str) -> tuple[list[int], list[int]]:
    """The tokens, and each round's emitted count."""
    use(arm)
    session = Session(engine, SamplingParams(), GenerationStats(), True, width=width)
    outs = list(session.generate(prompt, TOKENS))
    return [t.id for out in outs for t in out], [len(out) for out in outs]


def exactness(engine: Engine, prompts: list[list[int]]) -> bool:
    ok = True
    for i, prompt in enumerate(prompts):
        scores_equal = mx.array_equal(first_draft(prompt, "before"), first_draft(prompt, "staged"))
        classic, _ = decode(prompt, 1, "before")
        plain, plain_rounds = decode(prompt, 8, "before")
        staged, staged_rounds = decode(prompt, 8, "staged")
        row = {
            "prompt": i,
            "scores_equal": scores_equal.item(),
            "plain_equal": plain == classic,
            "staged_equal": staged == classic,
            "rounds_equal": plain_rounds == staged_rounds,
            "rounds": len(staged_rounds),
        }
        print(json.dumps(row), flush=True)
        ok = ok and plain == classic and staged == classic
    print(json.dumps({"exact": ok}), flush=True)
    return ok


prompts = [engine.tokenizer.encode(p) for p in read_prompts_file(PROMPTS).first_per_kind(4).prompts]
if exactness(engine, prompts):
    arms: dict[str, Callable[[], None]] = {
        arm: partial(use, arm) for arm in ("before", "staged", "early")
    }
    for run in range(RUNS):
        print(f"rounds run {run}", flush=True)
        alternate_rounds(engine, arms, 8)
    alternate(engine, {arm: arms[arm] for arm in ("before", "staged")}, N, TOKENS)
