"""Tests for agentloop.adapters.sqlite_tasks: durable records, scoped reads and compare-and-set moves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from agentloop.adapters import SqliteTaskStore
from agentloop.ports import TaskRecord, TaskState, TaskStore
from agentloop.scopes import Scope

WHEN = datetime(2026, 1, 1, tzinfo=UTC)
LATER = WHEN + timedelta(minutes=5)
ACME = Scope(org_id="acme", project_id="shop")
GLOBEX = Scope(org_id="globex", project_id="shop")


def _record(task_id: str, scope: Scope = Scope()) -> TaskRecord:
    return TaskRecord(task_id, "fix", {"k": "v"}, TaskState.INCOMING, WHEN, WHEN, scope=scope, chain=scope)


def test_records_survive_reopening_the_file(tmp_path: Path) -> None:
    store = SqliteTaskStore(tmp_path / "t.db")
    assert isinstance(store, TaskStore)
    chain = Scope(org_id="acme", project_id="shop", user_id="ann", session_id="s1")
    store.add(TaskRecord("a", "fix", {"k": "v"}, TaskState.INCOMING, WHEN, WHEN, scope=ACME, chain=chain))
    store.move("a", ACME, (TaskState.INCOMING,), TaskState.CLAIMED, updated_at=WHEN, claimed_by="x",
               count_attempt=True, lease_expires_at=LATER)
    store.close()
    reopened = SqliteTaskStore(tmp_path / "t.db")
    assert reopened.get("a", ACME) == TaskRecord(
        "a", "fix", {"k": "v"}, TaskState.CLAIMED, WHEN, WHEN, "x", 1, scope=ACME, chain=chain, lease_expires_at=LATER
    )
    reopened.close()


def test_a_move_from_the_wrong_state_changes_nothing(tmp_path: Path) -> None:
    store = SqliteTaskStore(tmp_path / "t.db")
    store.add(_record("a"))
    assert store.move("a", Scope(), (TaskState.PROVISIONAL,), TaskState.DONE, updated_at=WHEN, claimed_by=None) is None
    assert store.move("missing", Scope(), (TaskState.INCOMING,), TaskState.DONE, updated_at=WHEN, claimed_by=None) is None
    assert store.get("a", Scope()) == _record("a")
    store.close()


def test_in_state_lists_oldest_first(tmp_path: Path) -> None:
    store = SqliteTaskStore(tmp_path / "t.db")
    for task_id in ("c", "a", "b"):
        store.add(_record(task_id))
    store.move("a", Scope(), (TaskState.INCOMING,), TaskState.CLAIMED, updated_at=WHEN, claimed_by="x")
    assert [r.id for r in store.in_state(TaskState.INCOMING, Scope())] == ["c", "b"]
    assert [r.id for r in store.in_state(TaskState.CLAIMED, Scope())] == ["a"]
    store.close()


def test_a_task_of_another_scope_is_neither_read_listed_nor_moved(tmp_path: Path) -> None:
    """The same project id under another org is another tenant."""
    store = SqliteTaskStore(tmp_path / "t.db")
    store.add(_record("a", ACME))
    assert store.get("a", GLOBEX) is None
    assert store.in_state(TaskState.INCOMING, GLOBEX) == ()
    assert store.move("a", GLOBEX, (TaskState.INCOMING,), TaskState.CLAIMED, updated_at=WHEN, claimed_by="x") is None
    assert store.get("a", ACME) == _record("a", ACME)
    store.close()


def test_guards_refuse_a_move_when_the_claim_changed_hands_or_was_renewed(tmp_path: Path) -> None:
    store = SqliteTaskStore(tmp_path / "t.db")
    store.add(_record("a"))
    claimed = (TaskState.CLAIMED,)
    store.move("a", Scope(), (TaskState.INCOMING,), TaskState.CLAIMED, updated_at=WHEN, claimed_by="x")
    assert store.move("a", Scope(), claimed, TaskState.PROVISIONAL, updated_at=LATER, claimed_by=None, held_by="y") is None
    assert store.move("a", Scope(), claimed, TaskState.INCOMING, updated_at=LATER, claimed_by=None,
                      unchanged_since=LATER) is None
    moved = store.move("a", Scope(), claimed, TaskState.INCOMING, updated_at=LATER, claimed_by=None,
                       held_by="x", unchanged_since=WHEN)
    assert moved is not None and (moved.state, moved.claimed_by, moved.updated_at) == (TaskState.INCOMING, None, LATER)
    store.close()
