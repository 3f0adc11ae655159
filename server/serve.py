"""Wire settings -> worker (load, policy) -> app -> uvicorn, and log what was chosen."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import structlog
import uvicorn

from drafter.cpu_blas import blas_in_use
from drafter.loading import Loaded, LoadOptions, load_engine
from policy import TableEntry
from server.app import create_app
from server.logs import configure_logging
from server.metrics import Metrics
from server.plan import ModelFacts
from server.settings import ServeSettings, unknown_env_vars
from server.shutdown import FLUSH_TIMEOUT_S, GracefulServer
from server.state import ServerState
from server.worker import ModelWorker

log = structlog.get_logger("draftwise.server")


def load_options(
    settings: ServeSettings,
    draft_block_size: str | None,
    environ: Mapping[str, str],
    calibration: tuple[TableEntry, ...] = (),
    kernels: Mapping[str, str] | None = None,
) -> LoadOptions:
    return LoadOptions(
        cache_dir=settings.cache_dir,
        model=settings.model,
        draft_model=settings.draft_model,
        draft_kind=settings.draft_kind,
        draft_block_size=draft_block_size,
        environ=environ,
        calibration=calibration,
        exactness=settings.exactness,
        dtype=settings.dtype,
        prompt_cache_bytes=settings.prompt_cache_bytes,
        prompt_cache_hits=settings.prompt_cache_hits,
        freeze_heap=True,
        attention=(kernels or {}).get("attention"),
        linear=(kernels or {}).get("linear"),
        activation=(kernels or {}).get("activation"),
    )


def startup_fields(settings: ServeSettings, flags: Mapping[str, Any]) -> dict[str, Any]:
    fields = settings.model_dump(mode="json", exclude={"api_key"})
    fields["api_key"] = "set" if settings.api_key else "unset"
    fields["flags"] = sorted(flags)
    return fields


def serve(
    settings: ServeSettings,
    draft_block_size: str | None,
    environ: Mapping[str, str],
    flags: Mapping[str, Any],
    calibration: tuple[TableEntry, ...] = (),
    blas_note: str = "",
    kernels: Mapping[str, str] | None = None,
) -> BaseException | None:
    """Run until shutdown; returns the load failure that stopped the server, if any.
    kernels: kernel modes chosen by hand (server/tooling/lab.py only)."""
    configure_logging(settings.log_level)
    log.info("server.starting", blas_setup=blas_note, **startup_fields(settings, flags))
    for name in unknown_env_vars(environ):
        log.warning("settings.unknown_env_var", name=name)
    metrics = Metrics()
    failure: dict[str, BaseException] = {}
    servers: list[uvicorn.Server] = []

    def on_load_failed(error: BaseException) -> None:
        failure["error"] = error
        log.error("model.load_failed", error=f"{type(error).__name__}: {error}")
        for server in servers:
            server.should_exit = True

    def on_loaded(loaded: Loaded) -> None:
        engine = loaded.engine
        state.facts = ModelFacts(
            engine.model_id,
            engine.tokenizer,
            engine.vocab_size,
            engine.context_length,
            engine.grammars,
        )
        state.blas = blas_in_use()
        report_loaded(loaded, metrics, settings, state.blas)

    options = load_options(settings, draft_block_size, environ, calibration, kernels)
    if kernels:
        log.warning("server.lab_kernels", **kernels)
    worker = ModelWorker(
        lambda: load_engine(options),
        settings.max_queue_depth,
        metrics,
        max_batch_size=settings.max_batch_size,
        on_load_failed=on_load_failed,
        on_loaded=on_loaded,
    )
    state = ServerState(settings, worker, metrics)
    config = uvicorn.Config(
        create_app(state),
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=FLUSH_TIMEOUT_S,
    )
    servers.append(GracefulServer(config, state))
    worker.start()
    if "error" not in failure:
        servers[0].run()
    worker.stop(timeout=1.0)
    log.info("server.stopped", served_s=round(time.time() - state.started_at, 1))
    return failure.get("error")


def report_loaded(
    loaded: Loaded, metrics: Metrics, settings: ServeSettings, blas: str | None
) -> None:
    config = loaded.speculative_config()
    log.info("dflash.config", **config)
    probe = loaded.probe
    serving = "speculative" if loaded.speculative else "classic decode"
    if probe is not None and probe.defects:
        for defect in probe.defects:  # never hidden behind "rounding"
            log.error(
                "dflash.defect",
                block_size=probe.width,
                prompt=defect.prompt_index + 1,
                position=defect.position,
                classic_token=defect.classic,
                speculative_token=defect.speculative,
                margin=defect.margin,
                tolerance=probe.tolerance,
                serving=serving,
            )
    elif probe is not None and not probe.exact:
        log.warning(
            "dflash.rounding",
            block_size=probe.width,
            divergences=[d.describe() for d in probe.divergences],
            tolerance=probe.tolerance,
            serving=serving,
        )
    for override in loaded.resolution.ignored:
        log.info("dflash.override_ignored", ignored=override.describe(), winner=config["source"])
    metrics.block_size.set(loaded.engine.block_size or 0)
    log.info(
        "server.ready",
        model=loaded.engine.model_id,
        path=str(loaded.target_path),
        backend=loaded.device.backend,
        blas=blas if loaded.device.backend == "cpu" else None,
        context_length=loaded.engine.context_length,
        speculative=loaded.speculative,
        url=f"http://{settings.host}:{settings.port}/v1",
    )
