"""`InMemorySummaryStore`: the SummaryStore port in a dict, for a bot with no stores and for tests."""

from __future__ import annotations

import threading
from datetime import datetime

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
            if (kept[-1].version if kept else 0) != summary.version - 1:
                return False
            kept.append(summary)
        return True

    def prune(self, before: datetime) -> int:
        """Forget the summaries made before `before` (a history's latest is its newest, so it goes last); how many."""
        removed = 0
        with self._lock:
            for scope, kept in list(self._summaries.items()):
                newer = [summary for summary in kept if summary.created_at >= before]
                removed += len(kept) - len(newer)
                if newer:
                    self._summaries[scope] = newer
                else:
                    del self._summaries[scope]
        return removed

    async def latest(self, scope: Scope) -> SessionSummary | None:
        with self._lock:
            kept = self._summaries.get(scope)
            return kept[-1] if kept else None

    async def versions(self, scope: Scope) -> tuple[SessionSummary, ...]:
        with self._lock:
            return tuple(self._summaries.get(scope, ()))
