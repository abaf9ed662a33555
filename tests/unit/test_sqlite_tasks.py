"""Tests for agentloop.adapters.sqlite_tasks: durable records, scoped reads and compare-and-set moves."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agentloop import Session
from agentloop.adapters import SqliteTaskStore
from agentloop.ports import TaskRecord, TaskState, TaskStore
from agentloop.scopes import Scope
from agentloop.tasks import DEFAULT_LEASE, AttemptNotes, TaskLifecycle
from agentloop.testing import FakeClock

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


def test_a_database_of_the_previous_release_is_migrated_in_place(tmp_path: Path) -> None:
    """Its rows recorded no chain: they stay readable, by the chain with no org, team or project only,
    and a claim it held expires one lease after its last update."""
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE tasks (id TEXT PRIMARY KEY, template TEXT NOT NULL, inputs TEXT NOT NULL, state TEXT NOT NULL,"
        " created_at TEXT NOT NULL, updated_at TEXT NOT NULL, claimed_by TEXT, attempts INTEGER NOT NULL DEFAULT 0,"
        " seq INTEGER NOT NULL); CREATE INDEX tasks_state ON tasks (state, seq);"
    )
    old.execute(
        "INSERT INTO tasks VALUES ('old', 'fix', '{\"k\": \"v\"}', 'claimed', ?, ?, 'gone', 1, 1)",
        (WHEN.isoformat(), WHEN.isoformat()),
    )
    old.commit()
    old.close()
    store = SqliteTaskStore(path)
    expected = TaskRecord("old", "fix", {"k": "v"}, TaskState.CLAIMED, WHEN, WHEN, "gone", 1)
    assert store.get("old", Scope()) == expected
    assert store.get("old", ACME) is None and store.in_state(TaskState.CLAIMED, Scope(org_id="acme")) == ()
    store.add(_record("new", ACME))
    store.close()
    reopened = SqliteTaskStore(path)
    assert [r.id for r in reopened.in_state(TaskState.CLAIMED, Scope())] == ["old"]
    assert reopened.get("new", ACME) == _record("new", ACME)
    clock = FakeClock(start=WHEN)
    acme = TaskLifecycle(reopened, AttemptNotes(tmp_path / "notes"), session=Session("s", org_id="acme"), clock=clock)
    default = TaskLifecycle(reopened, AttemptNotes(tmp_path / "notes"), clock=clock)
    clock.advance(DEFAULT_LEASE.total_seconds())  # its claim, from before leases, holds one lease
    assert acme.claim_next("worker") is None
    taken = default.claim_next("worker")
    assert taken is not None and (taken.id, taken.attempts) == ("old", 2)
    reopened.close()
