"""The TrajectoryStore port: where captured tool executions are written in batches."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from agentloop.components import ToolExecution
    from agentloop.notes.models import Trajectory


@runtime_checkable
class TrajectoryStore(Protocol):
    def append(self, executions: Sequence[ToolExecution]) -> None:
        """Write a batch all-or-nothing; an execution whose id is already stored is skipped.

        Raises on failure so the caller can retry the whole batch.
        """
        ...

    def load(self, session_id: str) -> Trajectory:
        """The session's executions, in the order they started (empty if none)."""
        ...

    def count(self) -> int:
        """How many executions are stored."""
        ...

    def mark_distilled(self, trajectory_hash: str, session_id: str, note_id: int, at: datetime) -> None:
        """Remember that a trajectory with this content hash produced (or matched) `note_id`."""
        ...

    def is_distilled(self, trajectory_hash: str) -> bool:
        """Whether a trajectory with this content hash was already distilled."""
        ...
