"""Logging set-up for applications: structlog to stderr, console or JSON, one level.

Importing agentloop configures nothing: until an application configures structlog (here or
itself), library events go to the standard `logging` loggers named `agentloop...`, so the
application's logging set-up decides where they go and one without any sees warnings and
errors on stderr, as with any Python library; log lines never mix into a bot's stdout.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

from agentloop.errors import LogLevelError


def configure_logging(level: str | int = "INFO", *, json: bool = False, stream: TextIO | None = None) -> None:
    """Route structlog events at `level` and above to `stream` (stderr by default).

    Library code never calls this; applications and the `agentloop` command do. Below
    `level`, log calls are no-ops and the loop skips its per-system events entirely.
    Without it, events go to the standard `logging` module (warnings reach stderr by default).
    """
    numeric = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(numeric, int):
        raise LogLevelError(f"unknown log level {level!r}; use DEBUG, INFO, WARNING or ERROR")
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback)
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
