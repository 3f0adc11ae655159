"""What the HTTP side holds: settings, live settings, the worker handle, metrics."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from drafter.loading import Loaded
from server.errors import unavailable
from server.metrics import Metrics
from server.plan import ModelFacts
from server.settings import LiveSettings, ServeSettings
from server.worker import ModelWorker, WorkerState


@dataclass
class ServerState:
    settings: ServeSettings
    worker: ModelWorker
    metrics: Metrics
    live: LiveSettings = field(init=False)
    facts: ModelFacts | None = None
    started_at: float = field(default_factory=time.time)
    blas: str | None = None  # the BLAS MLX's CPU calls bind to, read once at load
    drain_deadline: float | None = None  # time.monotonic() when the shutdown grace ends

    @property
    def draining(self) -> bool:
        """True after SIGTERM: no new requests, in-flight ones finish."""
        return self.drain_deadline is not None

    def __post_init__(self) -> None:
        self.live = self.settings.live()

    @property
    def loaded(self) -> Loaded | None:
        return self.worker.loaded

    def model_facts(self) -> ModelFacts:
        """The loaded model's facts, or a 503 while loading / after the worker failed."""
        if self.facts is not None and self.worker.ready:
            return self.facts
        if self.worker.state == WorkerState.LOADING:
            raise unavailable("The model is still loading; retry shortly", "model_loading")
        raise unavailable(f"The model worker is {self.worker.state.value}", "worker_unavailable")
