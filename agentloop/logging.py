"""Logging set-up for applications: structlog to stderr, console or JSON, one level."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog


def configure_logging(level: str | int = "INFO", *, json: bool = False, stream: TextIO | None = None) -> None:
    """Route structlog events at `level` and above to `stream` (stderr by default).

    Library code never calls this; applications and the `agentloop` command do. Below
    `level`, log calls are no-ops and the loop skips its per-system events entirely.
    While structlog is left unconfigured the loop logs only failures, so that its
    events do not mix with a console bot's replies on stdout.
    """
    numeric = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}; use DEBUG, INFO, WARNING or ERROR")
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info if json else structlog.dev.set_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
