"""The TaskStore port: durable task records, their lifecycle state, tenant chain and claim lease."""

from __future__ import annotations

from collections.abc import AsyncIterator
import enum
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import attrs

from agentloop.privacy import Subject
from agentloop.scopes import Scope


class TaskState(enum.Enum):
    """Where a task is: incoming → claimed → provisional → done, or failed."""

    INCOMING = "incoming"
    CLAIMED = "claimed"
    PROVISIONAL = "provisional"
    DONE = "done"
    FAILED = "failed"


@attrs.frozen
class TaskRecord:
    """One task to run: which template, with which inputs, where it is now, and whose it is.

    `chain` is the full tenant chain of the session that created it; `scope` is the part
    of that chain whose callers may see and claim it. A claimed task's claim holds until
    `lease_expires_at` unless its agent renews it.
    """

    id: str
    template: str
    inputs: dict[str, str] = attrs.field(hash=False)
    state: TaskState
    created_at: datetime
    updated_at: datetime
    claimed_by: str | None = None
    attempts: int = 0
    scope: Scope = Scope()
    chain: Scope = Scope()
    lease_expires_at: datetime | None = None


@runtime_checkable
class TaskStore(Protocol):
    """Task records by id within a scope; every call is a coroutine."""

    async def add(self, record: TaskRecord) -> None:
        """Store a new task; `ValueError` if one with that id exists."""
        ...

    async def get(self, task_id: str, scope: Scope) -> TaskRecord | None:
        """The task with that id if it belongs to `scope`, else None."""
        ...

    async def move(
        self,
        task_id: str,
        scope: Scope,
        allowed_from: tuple[TaskState, ...],
        to: TaskState,
        *,
        updated_at: datetime,
        claimed_by: str | None,
        count_attempt: bool = False,
        lease_expires_at: datetime | None = None,
        held_by: str | None = None,
        unchanged_since: datetime | None = None,
    ) -> TaskRecord | None:
        """Atomically move the task of `scope` to `to` if it is in one of `allowed_from`.

        `held_by` also requires that agent to hold the claim, `unchanged_since` that the
        task was last updated then (nothing moved or renewed it since it was read). Returns the updated record (`claimed_by` and `lease_expires_at`
        set as given), or None (and changes nothing) if a condition fails or the task is
        not in `scope`. `count_attempt` adds one to `attempts`. Which moves are allowed and
        when a lease ran out are `TaskLifecycle`'s to decide; the store only compares and sets.
        """
        ...

    async def in_state(self, state: TaskState, scope: Scope) -> tuple[TaskRecord, ...]:
        """Tasks of `scope` in `state`, oldest first."""
        ...

    async def erase(self, subject: Subject) -> int:
        """Remove every row of `subject` (`agentloop.privacy`) in one transaction; how many (0 when run again)."""
        ...

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        """Every row kept about `subject`, one JSON-ready record at a time (docs/privacy.md gives each shape)."""
        ...
