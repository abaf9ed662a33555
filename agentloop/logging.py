"""Logging set-up for applications: structlog to stderr, console or JSON, one level.

Until an application configures structlog, importing agentloop sends warnings and errors to
stderr and drops the rest (as Python's own logging does), so log lines never mix into a bot's
output on stdout.
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
    Without it, only warnings and errors reach stderr (`library_default`).
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


def library_default() -> None:
    """Send structlog's warnings and errors to stderr, the rest nowhere, unless structlog was
    configured already: called when agentloop is imported, so an application that never
    configures logging gets no log lines on stdout. `configure_logging` replaces it."""
    if structlog.is_configured():
        return
    # Filtered by a processor, not the wrapper class: structlog.testing.capture_logs, which
    # replaces the processors, then still sees every level, as it does unconfigured.
    structlog.configure(
        processors=[
            _warnings_and_errors,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.dev.set_exc_info,
            # plain tracebacks: with rich installed, structlog renders each one through rich, ~0.1 s a failure
            structlog.dev.ConsoleRenderer(colors=False, exception_formatter=structlog.dev.plain_traceback),
        ],
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )


def _warnings_and_errors(logger: object, method_name: str, event_dict: structlog.typing.EventDict) -> structlog.typing.EventDict:
    if logging.getLevelName(method_name.upper()) in _BELOW_WARNING:
        raise structlog.DropEvent
    return event_dict


_BELOW_WARNING = frozenset({logging.DEBUG, logging.INFO, logging.NOTSET})


def _stderr_logger(*args: object) -> structlog.PrintLogger:
    """A logger on the stderr of the moment (a test or an application may have replaced it)."""
    return structlog.PrintLogger(sys.stderr)
