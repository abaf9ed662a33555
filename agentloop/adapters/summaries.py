"""`InMemorySummaryStore`: the SummaryStore port in a dict, for a bot with no stores and for tests."""

from __future__ import annotations

import threading

from agentloop.ports.summaries import SessionSummary
from agentloop.scopes import Scope


class InMemorySummaryStore:
    """Each scope's summaries in a list, version 1 first; gone when the process ends."""

    def __init__(self) -> None:
        self._summaries: dict[Scope, list[SessionSummary]] = {}
        self._lock = threading.Lock()

    async def add(self, summary: SessionSummary) -> bool:
        with self._lock:
            kept = self._summaries.setdefault(summary.scope, [])
            if len(kept) != summary.version - 1:
                return False
            kept.append(summary)
        return True

    async def latest(self, scope: Scope) -> SessionSummary | None:
        with self._lock:
            kept = self._summaries.get(scope)
            return kept[-1] if kept else None

    async def versions(self, scope: Scope) -> tuple[SessionSummary, ...]:
        with self._lock:
            return tuple(self._summaries.get(scope, ()))
