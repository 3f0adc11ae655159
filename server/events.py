"""What the model worker and the HTTP side hand each other: a `Job` (its
`CompletionPlan`, already tokenized and validated) in, its events out.

A job's events arrive in order on its asyncio queue: `Chunk`s and one `Finished` per
choice, then `Done` (with the usage), or `Failed` at any point.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from drafter.decoding import GenerationStats
from drafter.sampling import SamplingParams


@dataclass(frozen=True)
class ChoicePlan:
    index: int
    prompt: int  # index into CompletionPlan.prompts
    params: SamplingParams


@dataclass(frozen=True)
class CompletionPlan:
    prompts: list[list[int]]
    choices: list[ChoicePlan]
    max_tokens: int
    stop: tuple[str, ...] = ()
    echo: bool = False
    logprobs: int | None = None
    ignore_eos: bool = False  # EOS is an ordinary token; only max_tokens (or stop) ends


@dataclass(frozen=True)
class Chunk:
    index: int
    text: str
    logprobs: dict[str, list[Any]] | None
    eos: bool = False  # the end-of-sequence token's logprob only (its text is never shown)


@dataclass(frozen=True)
class Finished:
    index: int
    finish_reason: str
    completion_tokens: int
    stats: GenerationStats = field(default_factory=GenerationStats)  # this choice's


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    stats: GenerationStats = field(default_factory=GenerationStats)

    def add_stats(self, stats: GenerationStats) -> None:
        total = self.stats
        total.block_size = stats.block_size or total.block_size
        total.cached_tokens += stats.cached_tokens
        total.rounds += stats.rounds
        total.drafted += stats.drafted
        total.accepted += stats.accepted
        for width, rounds in stats.widths.items():
            total.widths[width] = total.widths.get(width, 0) + rounds
        total.decode_s += stats.decode_s
        total.prefill_s += stats.prefill_s
        total.mask_s += stats.mask_s
        total.masked_rows += stats.masked_rows
        for position, count in enumerate(stats.accepted_per_position):
            if position < len(total.accepted_per_position):
                total.accepted_per_position[position] += count
            else:
                total.accepted_per_position.append(count)


@dataclass(frozen=True)
class Done:
    usage: Usage


@dataclass(frozen=True)
class Failed:
    reason: str  # "cancelled", "timeout" or "error"
    message: str


Event = Chunk | Finished | Done | Failed


@dataclass(eq=False)
class Job:
    # eq=False: jobs are hashed by identity (the worker keeps a set of active ones)
    id: str
    plan: CompletionPlan
    loop: asyncio.AbstractEventLoop
    deadline: float  # time.monotonic() after which the job is abandoned
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    cancel_reason: str = "cancelled"
    admitted_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None  # when the worker took it

    def emit(self, event: Event) -> None:
        """Called on the worker thread; hands the event to the request's event loop."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:  # the loop closed: the server is gone, nobody is listening
            self.cancelled.set()

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop at the next round: 'cancelled' (client gone) or 'shutdown' (grace over)."""
        if not self.cancelled.is_set():
            self.cancel_reason = reason
            self.cancelled.set()

    def should_stop(self) -> str | None:
        if self.cancelled.is_set():
            return self.cancel_reason
        if time.monotonic() >= self.deadline:
            return "timeout"
        return None
