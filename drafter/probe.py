"""The startup exactness probe: is every difference from classic decode kernel rounding?

Greedy speculative decode verifies w rows in one target forward; classic decode
feeds one row. The two kernels may round differently (MLX has no
batch-invariant kernels; on CUDA bf16 the w-row logits differ from the one-row
logits of identical tokens by up to ~1.5), so where classic's top two logits
are (nearly) tied the argmax can flip. Such a flip is not a defect. A bug in
the round loop (a rollback that keeps a row too many, a choice read from the
wrong verify row) is, and it must never hide behind "rounding".

So the probe measures, on fixed prompts at the resolved width:

- kernel noise: the largest |logit difference| between one-row forwards and the
  shapes that serve, fed the very same tokens (classic's greedy continuation):
  w-row forwards of one prompt, and w-row forwards of every probe prompt in one
  batch (on CUDA the batch's masked attention rounds unlike the lone request's);
- every divergence of speculative from classic output, with classic's margin
  there: logit(classic token) - logit(speculative token). After a divergence
  speculation restarts from classic's tokens up to and including that
  position, so one tie cannot hide a later defect.

A flip needs the margin to move from >= 0 to <= 0. If each logit moves by at
most `noise`, a margin moves by at most 2 * noise: that is the tolerance.

    exact     no divergence
    rounding  every divergence has margin <= tolerance: the kernels disagree there
    differs   some divergence has margin > tolerance: a defect

Both ways run through the served decoder (drafter/batch.py): classic decode is its
width-1 step, speculation its step at the resolved width, alone and then with every
probe prompt in one batch, so the rows concurrent requests get are proven too (a
batched divergence is classified like a solo one, without the restarts).

EOS is ignored so the probe always compares the same number of tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx

from drafter.batch import SharedCaches, decode_together
from drafter.decoding import prefill
from drafter.diagnostics import ProbeFields
from drafter.engine import Engine
from drafter.sampling import SamplingParams

PROBE_PROMPT = (
    "Write a Python function that returns the n-th Fibonacci number, then explain "
    "in two sentences why the iterative version is faster than the recursive one.\n"
)
PROBE_PROSE = "The history of the printing press begins in the fifteenth century, when"
PROBE_PROMPTS = (PROBE_PROMPT, PROBE_PROSE)
PROBE_TOKENS = 64  # per prompt
MAX_DIVERGENCES = 8  # per prompt; each one costs a restart

EXACT, ROUNDING, DIFFERS = "exact", "rounding", "differs"


@dataclass(frozen=True)
class Divergence:
    prompt_index: int
    position: int  # index among the generated tokens
    classic: int
    speculative: int
    margin: float  # classic's logit(classic) - logit(speculative) there, one-row forward
    batched: bool = False  # in the step shared by every probe prompt

    def describe(self) -> str:
        where = " (batched)" if self.batched else ""
        return (
            f"prompt {self.prompt_index + 1} token {self.position}{where}: classic "
            f"{self.classic}, speculative {self.speculative}, margin {self.margin:.4g}"
        )


@dataclass(frozen=True)
class ProbeResult:
    width: int
    tokens: int  # classic tokens compared, all prompts together
    kernel_noise: float = 0.0
    divergences: tuple[Divergence, ...] = field(default_factory=tuple)

    @property
    def tolerance(self) -> float:
        return 2 * self.kernel_noise

    @property
    def defects(self) -> tuple[Divergence, ...]:
        return tuple(d for d in self.divergences if d.margin > self.tolerance)

    @property
    def exactness(self) -> str:
        if not self.divergences:
            return EXACT
        return DIFFERS if self.defects else ROUNDING

    @property
    def exact(self) -> bool:
        return not self.divergences

    @property
    def max_margin(self) -> float | None:
        return max((d.margin for d in self.divergences), default=None)

    def fields(self) -> ProbeFields:
        """What the dflash.config line and /health carry."""
        margin = self.max_margin
        return ProbeFields(
            exactness=self.exactness,
            divergences=len(self.divergences),
            max_margin=None if margin is None else round(margin, 6),
            kernel_noise=round(self.kernel_noise, 6),
            probe_tokens=self.tokens,
        )


def first_difference(classic: list[int], speculative: list[int]) -> int | None:
    for i, (a, b) in enumerate(zip(classic, speculative, strict=False)):
        if a != b:
            return i
    return None if len(classic) == len(speculative) else min(len(classic), len(speculative))


def probe_exactness(
    engine: Engine, prompt: list[int] | None = None, tokens: int = PROBE_TOKENS
) -> ProbeResult:
    """Classify greedy speculative decode at engine.block_size against classic, on
    `prompt` or else each probe prompt, `tokens` tokens each."""
    if not engine.speculative:
        raise ValueError("the exactness probe needs an engine with a drafter and a block size")
    prompts = (
        [prompt] if prompt is not None else [engine.tokenizer.encode(t) for t in PROBE_PROMPTS]
    )
    width = engine.block_size
    assert width is not None  # engine.speculative
    compared, noise, divergences = 0, 0.0, []
    classics, one_rows = [], []
    for index, ids in enumerate(prompts):
        classic = classic_tokens(engine, ids, tokens)
        compared += len(classic)
        one_row = teacher_forced_logits(engine, ids, classic, rows=1)
        w_rows = teacher_forced_logits(engine, ids, classic, rows=width)
        noise = max(noise, mx.max(mx.abs(one_row - w_rows)).item())
        divergences += realigned_divergences(engine, ids, classic, one_row, index)
        classics.append(classic)
        one_rows.append(one_row)
    if len(prompts) > 1:
        batched = batched_teacher_forced_logits(engine, prompts, classics, width)
        for one_row, rows in zip(one_rows, batched, strict=True):
            noise = max(noise, mx.max(mx.abs(one_row - rows)).item())
        divergences += batched_divergences(engine, prompts, classics, one_rows)
    return ProbeResult(width, compared, noise, tuple(divergences))


def classic_tokens(engine: Engine, prompt: list[int], tokens: int) -> list[int]:
    steps = engine.generate(prompt, tokens, SamplingParams(), ignore_eos=True, width=None)
    return [t.id for step in steps for t in step]


def batched_tokens(engine: Engine, prompts: list[list[int]], tokens: int) -> list[list[int]]:
    """Greedy tokens of every prompt decoded together at the resolved width."""
    return [
        [t.id for t in out] for out in decode_together(engine, prompts, tokens, SamplingParams())
    ]


def batched_divergences(
    engine: Engine, prompts: list[list[int]], classics: list[list[int]], one_rows: list[mx.array]
) -> list[Divergence]:
    """Where each prompt's batched output first leaves its classic output."""
    found = []
    batched = batched_tokens(engine, prompts, len(classics[0]))
    for index, (classic, tokens) in enumerate(zip(classics, batched, strict=True)):
        at = first_difference(classic, tokens)
        if at is not None and at < len(classic):
            spec = tokens[at] if at < len(tokens) else classic[at]
            where = margin(one_rows[index], at, classic, spec)
            found.append(Divergence(index, at, classic[at], spec, where, batched=True))
    return found


def speculative_tokens(engine: Engine, prompt: list[int], tokens: int) -> list[int]:
    steps = engine.generate(prompt, tokens, SamplingParams(), ignore_eos=True)
    return [t.id for step in steps for t in step]


def teacher_forced_logits(
    engine: Engine, prompt: list[int], tokens: list[int], rows: int
) -> mx.array:
    """(n, V) float32 logits predicting tokens[1:], fed `rows` tokens per forward
    after the prompt (rows=1: classic decode; rows=w: verify-shaped blocks)."""
    cache = engine.make_cache()
    prefill(engine.forward, prompt, cache)
    out = []
    fed = tokens[:-1]
    for start in range(0, len(fed), rows):
        block = mx.array(fed[start : start + rows])[None]
        out.append(engine.forward(block, cache)[0][0].astype(mx.float32))
        mx.eval(out[-1])
    return mx.concatenate(out) if out else mx.zeros((0, engine.vocab_size))


def batched_teacher_forced_logits(
    engine: Engine, prompts: list[list[int]], continuations: list[list[int]], rows: int
) -> list[mx.array]:
    """Per prompt, teacher_forced_logits' (n, V) with every prompt fed `rows` tokens in
    one forward over the shared caches, as the batched step feeds them."""
    caches = []
    for prompt in prompts:
        caches.append(engine.make_cache())
        prefill(engine.forward, prompt, caches[-1])
    shared = SharedCaches(caches)
    fed = [tokens[:-1] for tokens in continuations]
    out = []
    for start in range(0, min(len(f) for f in fed), rows):
        block = mx.array([f[start : start + rows] for f in fed])
        shared.arm()
        out.append(engine.forward(block, shared.layers)[0].astype(mx.float32))
        shared.commit([block.shape[1]] * len(fed))
        mx.eval(out[-1])
    return [mx.concatenate([o[b] for o in out]) for b in range(len(fed))]


def realigned_divergences(
    engine: Engine, prompt: list[int], classic: list[int], one_row: mx.array, index: int
) -> list[Divergence]:
    """Every place speculative output leaves classic's, restarting from classic's
    tokens after each, with classic's one-row margin there."""
    found: list[Divergence] = []
    position = 0
    while position < len(classic) and len(found) < MAX_DIVERGENCES:
        speculative = speculative_tokens(
            engine, prompt + classic[:position], len(classic) - position
        )
        offset = first_difference(classic[position:], speculative)
        if offset is None:
            break
        at = position + offset
        spec = speculative[offset] if offset < len(speculative) else classic[at]
        found.append(Divergence(index, at, classic[at], spec, margin(one_row, at, classic, spec)))
        position = at + 1
    return found


def margin(one_row: mx.array, at: int, classic: list[int], speculative: int) -> float:
    """logit(classic) - logit(speculative) where classic chose token `at`. Row at - 1
    of the teacher-forced logits predicts token `at`; token 0 comes from the prefill,
    identical on both paths, so a divergence there has no kernel excuse."""
    if at == 0:
        return float("inf")
    row = one_row[at - 1]
    return (row[classic[at]] - row[speculative]).item()
