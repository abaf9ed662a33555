"""The TrajectoryStore port: where captured tool executions are written in batches."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agentloop.privacy import Subject

if TYPE_CHECKING:
    from agentloop.components import ToolExecution
    from agentloop.notes.models import Trajectory
    from agentloop.scopes import Scope


@runtime_checkable
class TrajectoryStore(Protocol):
    """Captured tool executions and distilled trajectory hashes; every call is a coroutine."""

    async def append(self, executions: Sequence[ToolExecution]) -> None:
        """Write a batch all-or-nothing; an execution already stored (the same id, session and
        start) is skipped, so a batch written again after a failure is stored once.

        Raises on failure so the caller can retry the batch, or split it to find an
        execution the store refuses; `ExecutionRefusedError` (or another `ValueError`)
        says the store will never take one of them as it is, any other error may pass.
        """
        ...

    async def load(self, session_id: str, scope: Scope | None = None) -> Trajectory:
        """The session's executions, in the order they started (empty if none); with
        `scope`, only those recorded under its company, org, team, project and user (I11)."""
        ...

    async def quarantine(self, execution: ToolExecution, reason: str) -> None:
        """Keep an execution `append` refused, in a form that cannot be refused (escaped)."""
        ...

    async def quarantined(self) -> list[dict[str, str]]:
        """The kept executions the store refused, oldest first: id, session, tool and reason
        backslash-escaped to ASCII, and the whole execution as ASCII JSON."""
        ...

    async def count(self) -> int:
        """How many executions are stored."""
        ...

    async def mark_distilled(self, trajectory_hash: str, session_id: str, note_id: int, at: datetime) -> None:
        """Remember that a trajectory with this content hash produced (or matched) `note_id`."""
        ...

    async def is_distilled(self, trajectory_hash: str) -> bool:
        """Whether a trajectory with this content hash was already distilled."""
        ...

    async def erase(self, subject: Subject) -> int:
        """Remove every row of `subject` (`agentloop.privacy`) in one transaction; how many (0 when run again)."""
        ...

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        """Every row kept about `subject`, one JSON-ready record at a time (docs/privacy.md gives each shape)."""
        ...
