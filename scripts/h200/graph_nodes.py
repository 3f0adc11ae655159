"""Graph nodes and host build time of one width-8 verify forward and one draft, arm
"before" (bc2bdd0: `before/rowwise_bc2bdd0.py`, `before/attention_bc2bdd0.py`) against
"after" (this tree), built as CUDA builds them (vector attention, rowwise products), on
any device. Runs on CPU: there MLX's fast ops (RMSNorm, RoPE, attention) are built from
their fallback graphs, so the totals are larger than a GPU's, but the arms differ only
in the nodes the change touches. Build time: the Python ops of a forward, timed without
evaluating it. argv: n (default 20) interleaved passes."""

from __future__ import annotations

import io
import json
import re
import statistics
import sys
import time
from collections import Counter

import mlx.core as mx
from fewer_nodes import after, before

from drafter.decoding import GenerationStats
from drafter.loading import LoadOptions, load_engine
from drafter.sampling import SamplingParams
from drafter.speculative import Session
from server.settings import ServeSettings

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20
PROMPT = "def quicksort(items):\n    "


def nodes(*arrays: mx.array) -> Counter[str]:
    """The primitives of the graph behind `arrays`, by name (from MLX's DOT export)."""
    dot = io.StringIO()
    mx.export_to_dot(dot, *arrays)
    return Counter(re.findall(r'label ="([A-Za-z]+)', dot.getvalue()))


def measure(session: Session, anchor: int) -> tuple[dict[str, Counter[str]], dict[str, float], int]:
    """One round, its draft and verify built and timed apart; returns their nodes, their
    build times (ms) and the next anchor."""
    began = time.perf_counter()
    current = session.open(anchor, 8)
    draft_ms = 1e3 * (time.perf_counter() - began)
    draft = nodes(current.drafts)
    mx.eval(current.drafts)
    began = time.perf_counter()
    logits = session.model(current.tokens[None], cache=session.cache)[0]
    assert session.capture is not None
    verified = session.capture.features()
    verify_ms = 1e3 * (time.perf_counter() - began)
    verify = nodes(logits, verified)
    session.judge(current, logits, verified)
    mx.eval(current.arrays())
    tokens, _ = session.close(current, 1000)
    return {"draft": draft, "verify": verify}, {"draft": draft_ms, "verify": verify_ms}, tokens[-1]


options = LoadOptions(ServeSettings().cache_dir, dtype="bfloat16", exactness="off", warm_up=False)
engine = load_engine(options).engine
engine.attention, engine.linear = "vector", "rowwise"
prompt = engine.tokenizer.encode(PROMPT)
arms = {"before": before, "after": after}
times: dict[str, dict[str, list[float]]] = {a: {"draft": [], "verify": []} for a in arms}
for i in range(N + 1):
    for name in list(arms) if i % 2 == 0 else list(arms)[::-1]:
        arms[name]()
        session = Session(engine, SamplingParams(), GenerationStats(), True, width=8)
        anchor = session.prefill(prompt, 64)[0].id
        counts, ms, anchor = measure(session, anchor)  # the first round: cold
        counts, ms, _ = measure(session, anchor)
        if i == 0:
            print(json.dumps({"arm": name, **{k: dict(c) for k, c in counts.items()}}))
            continue
        for part, value in ms.items():
            times[name][part].append(value)
for name, parts in times.items():
    line = {part: (statistics.median(v), min(v), max(v)) for part, v in parts.items()}
    print(
        name,
        f"n = {N}, median / min / max ms:",
        {p: " / ".join(f"{x:.2f}" for x in t) for p, t in line.items()},
    )
for part in ("draft", "verify"):
    pairs = list(zip(times["after"][part], times["before"][part], strict=True))
    print(part, f"after cheaper in {sum(a < b for a, b in pairs)} of {len(pairs)} passes")
