"""structlog set-up: one event per line on stdout, JSON unless stdout is a terminal."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
METHOD_LEVELS = {
    **LEVELS,
    "warn": logging.WARNING,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
}
_threshold = {"level": logging.INFO}


def set_level(level: str) -> None:
    """Applies to every logger at once, so the level is a live setting."""
    _threshold["level"] = LEVELS[level]


def drop_below_level(
    _: Any, method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    if METHOD_LEVELS.get(method, logging.INFO) < _threshold["level"]:
        raise structlog.DropEvent
    return event


def configure_logging(level: str = "info", json: bool | None = None) -> None:
    set_level(level)
    json = not sys.stdout.isatty() if json is None else json
    renderer: Any = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            drop_below_level,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        logger_factory=structlog.PrintLoggerFactory(file=sys.stdout),
        cache_logger_on_first_use=False,
    )
