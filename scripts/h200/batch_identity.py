"""8 greedy requests of the default pair, batched in one BatchDecoder and alone: how many
outputs are identical, and where the first difference falls (H200 call, issue 17)."""

import time
from pathlib import Path

from drafter.batch import BatchDecoder
from drafter.decoding import GenerationStats
from drafter.loading import LoadOptions, load_engine
from drafter.sampling import SamplingParams
from server.tooling.loadtest import PROMPTS

TEXTS = [*PROMPTS, "class Stack:\n    def __init__(self):", "In 1969, the first"]
engine = load_engine(LoadOptions(cache_dir=Path("/root/cache"), prompt_cache_bytes=0)).engine
prompts = [engine.tokenizer.encode(t) for t in TEXTS]
params = SamplingParams()
alone = []
for p in prompts:
    rounds = engine.generate(p, 64, params, ignore_eos=True)
    alone.append([t.id for r in rounds for t in r])
decoder = BatchDecoder(engine)
seqs = [decoder.start(p, 64, params, GenerationStats(), True) for p in prompts]
out: list[list[int]] = [[] for _ in prompts]
for i, s in enumerate(seqs):
    while s.prefill is not None:
        out[i] += [t.id for t in decoder.advance_prefill(s)]
steps, began = 0, time.perf_counter()
while any(not s.done for s in seqs):
    live = [s for s in seqs if not s.done]
    decoder.step(live, decoder.width)
    steps += 1
    for i, s in enumerate(seqs):
        if s in live:
            out[i] += [t.id for t in s.tokens]
elapsed = time.perf_counter() - began
for i, (a, b) in enumerate(zip(alone, out, strict=False)):
    first = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    print(f"request {i}: identical={a == b} first_difference={first} tokens={len(b)}")
same = sum(a == b for a, b in zip(alone, out, strict=False))
print(f"identical {same} of {len(prompts)}; width {decoder.width}; {steps} steps, {elapsed:.2f} s")
