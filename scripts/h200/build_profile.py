"""Where a width-8 round's host time goes on the GPU host: the Python that builds it.

1. Per op: the host time to build (not evaluate) one MLX op of a few kinds, n = 2,000:
   an add, a batched one-row product (drafter/rowwise.py), a fast RoPE, a fast RMSNorm,
   a vector-kernel attention call.
2. Per stage: a draft's and a verify's build and evaluation, medians of 50.
3. cProfile over 60 whole rounds (`Session.round`) after 20 unprofiled ones: the top
   functions by own time and by cumulative time.
Prints plain text."""

from __future__ import annotations

import cProfile
import pstats
import time
from collections.abc import Callable

import mlx.core as mx
from ab import build_and_evaluate, width8_engine

from drafter.decoding import GenerationStats
from drafter.sampling import SamplingParams
from drafter.speculative import Session
from server.tooling.bench import read_prompts_file

engine = width8_engine()
print("modes:", engine.linear, engine.attention, engine.activation)


def per_op(name: str, build: Callable[[], object], n: int = 2000) -> None:
    build()
    began = time.perf_counter()
    for _ in range(n):
        build()
    print(f"op {name}: {1e6 * (time.perf_counter() - began) / n:.2f} us to build")


x = mx.random.normal((1, 8, 576)).astype(mx.bfloat16)
q = mx.random.normal((1, 9, 8, 64)).astype(mx.bfloat16)
k = mx.random.normal((1, 3, 300, 64)).astype(mx.bfloat16)
w = mx.random.normal((1536, 576)).astype(mx.bfloat16)
norm_w = mx.ones((576,), mx.bfloat16)
mx.eval(x, q, k, w, norm_w)
view = mx.as_strided(x, (8, 1, 576), (576, 1, 1))
per_op("add", lambda: x + 1)
per_op("rowwise product", lambda: view @ w.T[None])
per_op("rope", lambda: mx.fast.rope(q, 64, traditional=False, base=1e5, scale=1.0, offset=300))
per_op("rms_norm", lambda: mx.fast.rms_norm(x, norm_w, 1e-5))
per_op(
    "sdpa (3 rows)",
    lambda: mx.fast.scaled_dot_product_attention(q[:, :, :3], k, k, scale=0.125, mask="causal"),
)

prompt = engine.tokenizer.encode(
    read_prompts_file("server/tooling/heldout_prompts.json").prompts[0]
)
session = Session(engine, SamplingParams(), GenerationStats(), True, width=8)
anchor = session.prefill(prompt, 400)[0].id
mx.eval([c.state for c in session.draft_cache])


def stage_times(name: str, build: Callable[[], list[mx.array]], undo: Callable[[], object]) -> None:
    build_ms, eval_ms = build_and_evaluate(build, undo)
    print(f"{name}: build {build_ms:.3f} ms, evaluate {eval_ms:.3f} ms")


tokens = mx.array([prompt[-8:]])
assert session.capture is not None
stage_times(
    "verify (8 rows)",
    lambda: [engine.model(tokens, cache=session.cache), session.capture.features()],  # type: ignore[union-attr]
    lambda: [c.trim(8) for c in session.cache],
)
stage_times(
    "step (1 row)",
    lambda: [engine.model(tokens[:, :1], cache=session.cache)],
    lambda: [c.trim(1) for c in session.cache],
)
assert engine.drafter is not None
context = session.take_context()
stage_times(
    "draft (width 8)",
    lambda: [engine.drafter.draft_scores(anchor, context, session.draft_cache, 8).tokens()],  # type: ignore[union-attr]
    lambda: None,
)
session.context = context
for _ in range(20):
    tokens_out, _ = session.round(anchor, 1000)
    anchor = tokens_out[-1]
profile = cProfile.Profile()
began = time.perf_counter()
profile.enable()
for _ in range(60):
    tokens_out, _ = session.round(anchor, 1000)
    anchor = tokens_out[-1]
profile.disable()
print(f"60 rounds profiled: {1e3 * (time.perf_counter() - began) / 60:.2f} ms a round")
stats = pstats.Stats(profile)
stats.sort_stats("tottime").print_stats(25)
stats.sort_stats("cumtime").print_stats(25)
