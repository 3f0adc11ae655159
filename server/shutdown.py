"""Graceful shutdown: SIGTERM drains, then the process exits 0.

On the first SIGTERM (or SIGINT) the server stops admitting requests (503),
`/health` reports `draining`, and requests already admitted (queued or
generating) finish. When none is left, or when `shutdown_grace_s` has passed
(the rest are then cancelled, each within one round), uvicorn closes the
listener, lets the last responses flush and returns. A second signal stops at
once.

uvicorn's own handler re-raises the captured signal after its graceful
shutdown, which kills the process with SIGTERM (exit 143) before anything
after `Server.run()` runs; this server handles the signals itself instead.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Generator
from types import FrameType

import structlog
import uvicorn

from server.state import ServerState

log = structlog.get_logger("draftwise.server")
SIGNALS = (signal.SIGINT, signal.SIGTERM)
# After the grace period, cancelled jobs get this long to stop and answer.
CANCEL_GRACE_S = 5.0
# How long uvicorn waits for open responses to finish sending once draining is done.
FLUSH_TIMEOUT_S = 5


class GracefulServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.state = state
        self.cancelled_at: float | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """Install our handlers for the life of the server; never re-raise afterwards."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in SIGNALS}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Runs in the main thread between bytecodes: only set flags here."""
        state = self.state
        if state.drain_deadline is not None or not state.worker.ready:
            # A second signal, or nothing is being served yet: stop now.
            self.should_exit = True
            self.force_exit = state.drain_deadline is not None
            state.worker.cancel_all("shutdown")
            return
        grace = state.settings.shutdown_grace_s
        state.drain_deadline = time.monotonic() + grace
        state.metrics.draining.set(1)
        name = signal.Signals(sig).name
        log.info("server.draining", signal=name, in_flight=state.worker.in_flight, grace_s=grace)

    async def on_tick(self, counter: int) -> bool:
        deadline = self.state.drain_deadline
        if deadline is not None and not self.should_exit:
            self.check_drain(deadline)
        return await super().on_tick(counter)

    def check_drain(self, deadline: float) -> None:
        worker = self.state.worker
        now = time.monotonic()
        if worker.in_flight == 0:
            log.info("server.drained", cancelled=self.cancelled_at is not None)
            self.should_exit = True
        elif self.cancelled_at is None and now >= deadline:
            cancelled = worker.cancel_all("shutdown")
            log.warning("server.grace_expired", cancelled=cancelled)
            self.cancelled_at = now
        elif self.cancelled_at is not None and now >= self.cancelled_at + CANCEL_GRACE_S:
            log.error("server.worker_unresponsive", in_flight=worker.in_flight)
            self.should_exit = True
