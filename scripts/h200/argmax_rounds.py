"""Round by round: the greedy choice over the scores against d3d5890's log-softmax choice.

`argmax.py` compares `draftwise profile` medians, which pool two requests per
measurement and hid a 2-3 ms change on this CPU in their noise. This times every round
of 25-round requests (prompt `def quicksort(items):`, width given, default 4), the two
arms' `Session.judge` swapped per request in AB/BA order for 7 pairs after one untimed
pair; the first two rounds of each request are left out. Prints each request's median
and each arm's median and mean. argv: width (default 4)."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from ab import module_from, width8_engine

from drafter.decoding import GenerationStats
from drafter.sampling import SamplingParams
from drafter.speculative import Session

WIDTH = int(sys.argv[1]) if len(sys.argv) > 1 else 4
old = module_from(Path("before/speculative_d3d5890.py"), "before_speculative")
new_judge = Session.judge
engine = width8_engine()
prompt = engine.tokenizer.encode("def quicksort(items):\n    ")
rounds: dict[str, list[float]] = {"before": [], "after": []}
for pair in range(8):
    for arm in ("before", "after") if pair % 2 == 0 else ("after", "before"):
        if arm == "before":
            Session.judge = old.Session.judge  # type: ignore[method-assign]
            Session.row_logprobs = old.Session.row_logprobs  # type: ignore[attr-defined]
        else:
            Session.judge = new_judge  # type: ignore[method-assign]
        session = Session(engine, SamplingParams(), GenerationStats(), True, width=WIDTH)
        anchor = session.prefill(prompt, 80)[0].id
        times = []
        for _ in range(25):
            began = time.perf_counter()
            tokens, _ = session.round(anchor, 1000)
            times.append(time.perf_counter() - began)
            anchor = tokens[-1]
        if pair:
            rounds[arm] += times[2:]
            print(pair, arm, f"request median {1000 * statistics.median(times[2:]):.2f} ms")
for arm, seconds in rounds.items():
    median, mean = 1000 * statistics.median(seconds), 1000 * statistics.mean(seconds)
    print(arm, len(seconds), f"rounds: median {median:.2f} ms, mean {mean:.2f} ms")
