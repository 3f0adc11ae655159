"""Batched step cost on the device (issue 17): the default pair, 8 requests, the step at
widths 1, 4, 16 and batch sizes 1, 2, 4, 8, against a plain batched forward (mlx-lm's
own KVCache, the same rows) as the floor. Prints one line per case."""

import statistics
import time
from pathlib import Path

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from drafter.batch import BatchDecoder
from drafter.decoding import GenerationStats
from drafter.loading import LoadOptions, load_engine
from drafter.sampling import SamplingParams
from server.tooling.loadtest import PROMPTS

TEXTS = [*PROMPTS, "class Stack:\n    def __init__(self):", "In 1969, the first"]
engine = load_engine(LoadOptions(cache_dir=Path("/root/cache"), prompt_cache_bytes=0)).engine
prompts = [engine.tokenizer.encode(t) for t in TEXTS]
for batch in (1, 2, 4, 8):
    decoder = BatchDecoder(engine)
    seqs = [decoder.start(p, 10_000, SamplingParams(), GenerationStats(), True) for p in prompts]
    seqs = seqs[:batch]
    for s in seqs:
        while s.prefill is not None:
            decoder.advance_prefill(s)
    for width in (1, 4, 16, 1, 4, 16):
        times = []
        for _ in range(12):
            began = time.perf_counter()
            decoder.step(seqs, width)
            times.append(time.perf_counter() - began)
        ms = [round(1000 * t, 1) for t in times]
        print(
            f"step B={batch} w={width}: median {statistics.median(ms)} ms, first {ms[0]}, "
            f"max {max(ms)}, tokens/step {sum(len(s.tokens) for s in seqs)}",
            flush=True,
        )
    cache = make_prompt_cache(engine.model)
    engine.model(mx.zeros((batch, 64), dtype=mx.int32), cache=cache)
    mx.eval([c.state for c in cache])
    for rows in (1, 4, 16):
        times = []
        for _ in range(12):
            began = time.perf_counter()
            mx.eval(engine.model(mx.zeros((batch, rows), dtype=mx.int32), cache=cache))
            times.append(time.perf_counter() - began)
            for c in cache:
                c.trim(rows)
        print(
            f"plain forward B={batch} rows={rows}: median "
            f"{round(1000 * statistics.median(times), 1)} ms",
            flush=True,
        )
