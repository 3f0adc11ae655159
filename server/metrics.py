"""Prometheus metrics, on a registry per app so several apps can live in one process."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from drafter.decoding import GenerationStats
from drafter.prompt_cache import PromptCache


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "draftwise_requests", "HTTP requests by route, status", ["route", "status"], registry=r
        )
        self.latency = Histogram(
            "draftwise_request_duration_seconds", "Request latency", ["route"], registry=r
        )
        self.queue_depth = Gauge("draftwise_queue_depth", "Requests waiting", registry=r)
        self.queue_wait = Histogram(
            "draftwise_queue_wait_seconds", "Time from admission to the worker", registry=r
        )
        self.rejections = Counter(
            "draftwise_queue_rejections", "Requests refused by admission", ["reason"], registry=r
        )
        self.stopped = Counter(
            "draftwise_generations_stopped",
            "Generations abandoned between rounds (cancelled: client gone; timeout; shutdown)",
            ["reason"],
            registry=r,
        )
        self.in_flight = Gauge(
            "draftwise_requests_in_flight", "Admitted requests, queued or generating", registry=r
        )
        self.draining = Gauge("draftwise_draining", "1 after SIGTERM, while draining", registry=r)
        self.prompt_tokens = Counter("draftwise_prompt_tokens", "Prompt tokens", registry=r)
        self.completion_tokens = Counter(
            "draftwise_completion_tokens", "Generated tokens", registry=r
        )
        self.drafts = Counter("draftwise_spec_drafts", "Speculative rounds (drafts)", registry=r)
        self.draft_tokens = Counter("draftwise_spec_draft_tokens", "Drafted tokens", registry=r)
        self.accepted_tokens = Counter(
            "draftwise_spec_accepted_tokens", "Accepted draft tokens", registry=r
        )
        self.mask_seconds = Counter(
            "draftwise_grammar_mask_seconds",
            "Host time computing structured-output token masks",
            registry=r,
        )
        self.masked_rows = Counter(
            "draftwise_grammar_masked_rows", "Rows chosen under a grammar mask", registry=r
        )
        self.accepted_by_position = Counter(
            "draftwise_spec_accepted_by_position",
            "Accepted draft tokens by position in the block (1 = first draft)",
            ["position"],
            registry=r,
        )
        self.block_size = Gauge(
            "draftwise_draft_block_size", "Resolved draft block width (0 = classic)", registry=r
        )
        self.worker_ready = Gauge("draftwise_worker_ready", "1 when serving", registry=r)
        self.prompt_cache_hits = Counter(
            "draftwise_prompt_cache_hits", "Prefills that started from a cached prefix", registry=r
        )
        self.prompt_cache_misses = Counter(
            "draftwise_prompt_cache_misses", "Prefills with no usable cached prefix", registry=r
        )
        self.prompt_cache_tokens = Counter(
            "draftwise_prompt_cache_cached_tokens",
            "Prompt tokens served from the cache",
            registry=r,
        )
        self.prompt_cache_bytes = Gauge(
            "draftwise_prompt_cache_bytes", "Bytes held by the prompt cache", registry=r
        )
        self.batch_size = Histogram(
            "draftwise_batch_size",
            "Sequences per decoding step",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=r,
        )
        self.batch_step_tokens = Histogram(
            "draftwise_batch_step_tokens",
            "Tokens one decoding step emitted across the batch",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=r,
        )
        self.batch_step_seconds = Histogram(
            "draftwise_batch_step_seconds",
            "Wall time of one decoding step, by batch size class (as "
            "draftwise_batch_width_decisions), the verify width it ran (1 = classic) and "
            "whether its forward was queued before the step began (pipelined: true) or the "
            "step ran it itself (the first classic step after a wide one, a lone request's "
            "first, a round)",
            ["batch", "width", "pipelined"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5),
            registry=r,
        )
        self.batch_width = Counter(
            "draftwise_batch_width_decisions",
            "Decoding steps by batch size class (1, 2, 4, 8, ...: the sizes up to it), verify "
            "width (1 = classic) and why it was chosen (explore/reprobe: measuring; goodput: "
            "the most expected tokens per second; seeded: a seeded request, at the resolved "
            "width; classic: no drafter)",
            ["batch", "width", "reason"],
            registry=r,
        )
        self.prompt_cache_seen = (0, 0, 0)  # the cache's (hits, misses, tokens) last recorded

    def record_prompt_cache(self, cache: PromptCache | None) -> None:
        """Bring the counters up to the cache's own totals (the worker calls this)."""
        if cache is None:
            return
        totals = (cache.hits, cache.misses, cache.cached_tokens)
        counters = (self.prompt_cache_hits, self.prompt_cache_misses, self.prompt_cache_tokens)
        for counter, total, seen in zip(counters, totals, self.prompt_cache_seen, strict=True):
            counter.inc(total - seen)
        self.prompt_cache_seen = totals
        self.prompt_cache_bytes.set(cache.nbytes)

    def record_generation(
        self, prompt_tokens: int, completion_tokens: int, stats: GenerationStats
    ) -> None:
        self.prompt_tokens.inc(prompt_tokens)
        self.completion_tokens.inc(completion_tokens)
        self.drafts.inc(stats.rounds)
        self.draft_tokens.inc(stats.drafted)
        self.accepted_tokens.inc(stats.accepted)
        for position, count in enumerate(stats.accepted_per_position, start=1):
            self.accepted_by_position.labels(position=str(position)).inc(count)
        self.mask_seconds.inc(stats.mask_s)
        self.masked_rows.inc(stats.masked_rows)

    def render(self) -> bytes:
        return generate_latest(self.registry)
