"""The TaskStore port: durable task records and their lifecycle state."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Protocol, runtime_checkable

import attrs


class TaskState(enum.Enum):
    """Where a task is: incoming → claimed → provisional → done, or failed."""

    INCOMING = "incoming"
    CLAIMED = "claimed"
    PROVISIONAL = "provisional"
    DONE = "done"
    FAILED = "failed"


@attrs.frozen
class TaskRecord:
    """One task to run: which template, with which inputs, and where it is now."""

    id: str
    template: str
    inputs: dict[str, str] = attrs.field(hash=False)
    state: TaskState
    created_at: datetime
    updated_at: datetime
    claimed_by: str | None = None
    attempts: int = 0


@runtime_checkable
class TaskStore(Protocol):
    def add(self, record: TaskRecord) -> None:
        """Store a new task; `ValueError` if one with that id exists."""
        ...

    def get(self, task_id: str) -> TaskRecord | None:
        ...

    def move(
        self,
        task_id: str,
        allowed_from: tuple[TaskState, ...],
        to: TaskState,
        *,
        updated_at: datetime,
        claimed_by: str | None,
        count_attempt: bool = False,
    ) -> TaskRecord | None:
        """Atomically move the task to `to` if it is in one of `allowed_from`.

        Returns the updated record, or None (and changes nothing) if its state is not
        allowed or it does not exist. `count_attempt` adds one to `attempts`.
        """
        ...

    def in_state(self, state: TaskState) -> tuple[TaskRecord, ...]:
        """Tasks in `state`, oldest first."""
        ...
