"""Tests for agentloop.adapters.sqlite_tasks: durable records and compare-and-set moves."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from agentloop.adapters import SqliteTaskStore
from agentloop.ports import TaskRecord, TaskState, TaskStore

WHEN = datetime(2026, 1, 1, tzinfo=UTC)


def _record(task_id: str) -> TaskRecord:
    return TaskRecord(task_id, "fix", {"k": "v"}, TaskState.INCOMING, WHEN, WHEN)


def test_records_survive_reopening_the_file(tmp_path: Path) -> None:
    store = SqliteTaskStore(tmp_path / "t.db")
    assert isinstance(store, TaskStore)
    store.add(_record("a"))
    store.move("a", (TaskState.INCOMING,), TaskState.CLAIMED, updated_at=WHEN, claimed_by="x", count_attempt=True)
    store.close()
    reopened = SqliteTaskStore(tmp_path / "t.db")
    assert reopened.get("a") == TaskRecord("a", "fix", {"k": "v"}, TaskState.CLAIMED, WHEN, WHEN, "x", 1)
    reopened.close()


def test_a_move_from_the_wrong_state_changes_nothing(tmp_path: Path) -> None:
    store = SqliteTaskStore(tmp_path / "t.db")
    store.add(_record("a"))
    assert store.move("a", (TaskState.PROVISIONAL,), TaskState.DONE, updated_at=WHEN, claimed_by=None) is None
    assert store.move("missing", (TaskState.INCOMING,), TaskState.DONE, updated_at=WHEN, claimed_by=None) is None
    assert store.get("a") == _record("a")
    store.close()


def test_in_state_lists_oldest_first(tmp_path: Path) -> None:
    store = SqliteTaskStore(tmp_path / "t.db")
    for task_id in ("c", "a", "b"):
        store.add(_record(task_id))
    store.move("a", (TaskState.INCOMING,), TaskState.CLAIMED, updated_at=WHEN, claimed_by="x")
    assert [r.id for r in store.in_state(TaskState.INCOMING)] == ["c", "b"]
    assert [r.id for r in store.in_state(TaskState.CLAIMED)] == ["a"]
    store.close()
