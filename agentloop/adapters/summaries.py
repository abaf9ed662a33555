"""`InMemorySummaryStore`: the SummaryStore port in a dict, for a bot with no stores and for tests."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from agentloop.ports.summaries import SessionSummary
from agentloop.privacy import Subject, scope_record
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

    async def erase(self, subject: Subject) -> int:
        with self._lock:
            gone = [scope for scope in self._summaries if subject.matches(scope)]
            return sum(len(self._summaries.pop(scope)) for scope in gone)

    async def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        with self._lock:
            found = [summary for scope, kept in self._summaries.items() if subject.matches(scope) for summary in kept]
        for summary in found:
            yield {"kind": "summary", "scope": scope_record(summary.scope), "version": summary.version,
                   "covered": summary.covered, "text": summary.text, "created_at": summary.created_at.isoformat()}
