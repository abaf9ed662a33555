"""The SummaryStore port: each session's compacted history, one numbered version after another.

A summary covers the first `covered` messages of its session's history (in the session's
history scope, so tenancy is history's). Each new summary is the next version: a store adds
version n+1 only while n is the latest, so two processes compacting one session at once
store one summary and the other learns it lost.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import attrs

from agentloop.privacy import Subject
from agentloop.scopes import Scope


@attrs.frozen
class SessionSummary:
    """What the first `covered` messages of the history of `scope` said, as version `version`."""

    scope: Scope
    version: int
    covered: int
    text: str
    created_at: datetime

    def __attrs_post_init__(self) -> None:
        if self.version < 1 or self.covered < 0:
            raise ValueError(f"a summary's version starts at 1 and covers 0 or more messages, got {self.version}, {self.covered}")


@runtime_checkable
class SummaryStore(Protocol):
    """The summaries of each history scope, versions numbered from 1."""

    async def add(self, summary: SessionSummary) -> bool:
        """Store `summary` if its version is the next of its scope (1 for the first); True.

        False, storing nothing, when that version exists or an earlier one is missing
        (another process compacted the session first: read `latest` and try again)."""
        ...

    async def latest(self, scope: Scope) -> SessionSummary | None:
        """The newest summary of `scope`, None before the first."""
        ...

    async def versions(self, scope: Scope) -> tuple[SessionSummary, ...]:
        """Every summary of `scope`, version 1 first (to review what compaction kept)."""
        ...

    async def erase(self, subject: Subject) -> int:
        """Remove every row of `subject` (`agentloop.privacy`) in one transaction; how many (0 when run again)."""
        ...

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        """Every row kept about `subject`, one JSON-ready record at a time (docs/privacy.md gives each shape)."""
        ...
