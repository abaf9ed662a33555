"""The loggers library code writes to: structlog's configuration once an application made one,
else the standard `logging` logger of the same name, so importing agentloop configures nothing
and an application's logging set-up decides where library events go (warnings reach stderr
through logging's last-resort handler when it has none)."""

from __future__ import annotations

import logging
from typing import Any

import attrs
import structlog


def get_logger(name: str) -> LibraryLogger:
    """The library logger `name` (e.g. "agentloop.stores"), also the standard logger's name."""
    return LibraryLogger(name)


@attrs.frozen
class LibraryLogger:
    """Resolved on each use, as structlog's own lazy loggers are: `bind` returns a bound logger
    on the configuration of that moment, so `configure_logging` and `structlog.testing.capture_logs`
    see every event once they are in force."""

    name: str
    _standard: logging.Logger = attrs.field(init=False, eq=False, repr=False)

    @_standard.default
    def _standard_logger(self) -> logging.Logger:
        return logging.getLogger(self.name)

    def bind(self, **values: Any) -> Any:
        if structlog.is_configured():
            return structlog.get_logger(self.name).bind(**values)
        return structlog.wrap_logger(self._standard, processors=_TO_STANDARD, wrapper_class=structlog.stdlib.BoundLogger).bind(**values)

    def __getattr__(self, method: str) -> Any:
        if method.startswith("__"):
            raise AttributeError(method)
        if not structlog.is_configured():  # a level the standard logger drops costs one lookup, not a bound logger
            level = _LEVELS.get(method)
            if level is not None and not self._standard.isEnabledFor(level):
                return _ignore
        return getattr(self.bind(), method)


_LEVELS = {
    "debug": logging.DEBUG, "info": logging.INFO, "msg": logging.INFO, "warning": logging.WARNING, "warn": logging.WARNING,
    "error": logging.ERROR, "exception": logging.ERROR, "critical": logging.CRITICAL, "fatal": logging.CRITICAL,
}
"""The standard level of each of a structlog logger's event methods."""


def _ignore(*args: Any, **kwargs: Any) -> None:
    """An event method of a level nobody listens to."""


def _as_record(logger: object, method_name: str, event_dict: structlog.typing.EventDict) -> tuple[tuple[str], dict[str, Any]]:
    """The event as one message, `event key=value ...`, with its exception for logging to format."""
    exc_info = event_dict.pop("exc_info", None)
    event = str(event_dict.pop("event", ""))
    message = " ".join([event, *(f"{key}={value!r}" for key, value in event_dict.items())])
    return (message,), {"exc_info": exc_info}


_TO_STANDARD: list[structlog.typing.Processor] = [structlog.stdlib.filter_by_level, _as_record]
