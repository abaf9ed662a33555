"""Test kit for note-taking: tool executions made to order and a store that fails on cue."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from agentloop.components import ToolExecution
from agentloop.notes.models import Trajectory
from agentloop.ports.trajectories import TrajectoryStore
from agentloop.scopes import Scope

__all__ = ["FlakyTrajectoryStore", "make_execution", "make_executions"]

_ids = itertools.count(1)


def make_execution(
    tool_name: str = "search",
    *,
    session_id: str = "test-session",
    arguments: dict[str, Any] | None = None,
    result: str | None = "ok",
    error: str | None = None,
    started_at: datetime | None = None,
    duration_ms: float = 100.0,
    parent_id: str | None = None,
    user_id: str | None = "test-user",
    project_id: str | None = None,
    execution_id: str | None = None,
    context_snapshot: dict[str, str] | None = None,
    org_id: str | None = None,
    team_id: str | None = None,
    step_id: str | None = None,
) -> ToolExecution:
    """One finished tool execution; ids are unique within the process unless given."""
    return ToolExecution(
        id=execution_id or f"exec-{next(_ids)}",
        tool_name=tool_name,
        arguments=arguments if arguments is not None else {"query": tool_name},
        started_at=started_at or datetime(2026, 1, 1, tzinfo=UTC),
        duration_ms=duration_ms,
        session_id=session_id,
        result=None if error is not None else result,
        error=error,
        parent_id=parent_id,
        user_id=user_id,
        project_id=project_id,
        context_snapshot=context_snapshot or {},
        org_id=org_id,
        team_id=team_id,
        step_id=step_id,
    )


def make_executions(
    tools: Sequence[str],
    *,
    session_id: str = "test-session",
    start: datetime = datetime(2026, 1, 1, tzinfo=UTC),
    every_s: float = 15.0,
    **fields: Any,
) -> list[ToolExecution]:
    """Executions of `tools` in order, one starting every `every_s` seconds."""
    return [
        make_execution(tool, session_id=session_id, started_at=start + timedelta(seconds=i * every_s), **fields)
        for i, tool in enumerate(tools)
    ]


class FlakyTrajectoryStore:
    """Wraps a real TrajectoryStore; `append` raises `OSError` while `failing` is True,
    for the next `fail_next` calls, or on every `fail_every`-th call (an intermittent
    store: the 1st, then each `fail_every` calls later), so capture's retry path can be
    exercised. `quarantine` fails while `failing` is True."""

    def __init__(self, inner: TrajectoryStore) -> None:
        self.inner = inner
        self.failing = False
        self.fail_next = 0
        self.fail_every = 0
        self.failures = 0
        self.calls = 0

    async def append(self, executions: Sequence[ToolExecution]) -> None:
        self.calls += 1
        intermittent = self.fail_every > 0 and (self.calls - 1) % self.fail_every == 0
        if self.failing or self.fail_next > 0 or intermittent:
            self.fail_next = max(0, self.fail_next - 1)
            self.failures += 1
            raise OSError("injected trajectory store failure")
        await self.inner.append(executions)

    async def load(self, session_id: str, scope: Scope | None = None) -> Trajectory:
        return await self.inner.load(session_id, scope)

    async def quarantine(self, execution: ToolExecution, reason: str) -> None:
        if self.failing:
            raise OSError("injected trajectory store failure")
        await self.inner.quarantine(execution, reason)

    async def quarantined(self) -> list[dict[str, str]]:
        return await self.inner.quarantined()

    async def count(self) -> int:
        return await self.inner.count()

    async def mark_distilled(self, trajectory_hash: str, session_id: str, note_id: int, at: datetime) -> None:
        await self.inner.mark_distilled(trajectory_hash, session_id, note_id, at)

    async def is_distilled(self, trajectory_hash: str) -> bool:
        return await self.inner.is_distilled(trajectory_hash)
