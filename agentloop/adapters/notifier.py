"""Embedded MaintainerNotifier adapters: one logs, one keeps notices for tests and UIs."""

from __future__ import annotations

import threading
from typing import Any

from agentloop._log import get_logger
from agentloop.notes.models import MaintainerNotice


class LogNotifier:
    """Writes each notice as a structlog warning (the default when nobody is wired in)."""

    def __init__(self, logger: Any = None) -> None:
        self._log = logger if logger is not None else get_logger("agentloop.maintainers")

    def notify(self, notice: MaintainerNotice) -> None:
        self._log.warning("maintainer.notice", kind=notice.kind.value, note_ids=list(notice.note_ids), message=notice.message)


class RecordingNotifier:
    """Keeps every notice in order; read `notices` to see what maintainers were told."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._notices: list[MaintainerNotice] = []

    def notify(self, notice: MaintainerNotice) -> None:
        with self._lock:
            self._notices.append(notice)

    @property
    def notices(self) -> tuple[MaintainerNotice, ...]:
        with self._lock:
            return tuple(self._notices)
