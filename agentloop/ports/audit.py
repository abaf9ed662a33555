"""The AuditLog port: the record of every erase and export, who asked, what it covered, when and how many rows."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from agentloop.privacy import AuditRecord


@runtime_checkable
class AuditLog(Protocol):
    """Audit records, oldest first; every call is a coroutine. A record holds ids and counts, never content."""

    async def record(self, record: AuditRecord) -> None:
        """Keep `record`."""
        ...

    async def records(self) -> list[AuditRecord]:
        """Every record kept, oldest first."""
        ...
