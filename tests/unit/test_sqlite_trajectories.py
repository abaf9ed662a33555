"""SqliteTrajectoryStore: round trip, ordering, idempotent batches, distilled hashes."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agentloop.adapters import SqliteTrajectoryStore
from agentloop.testing.notes import make_execution, make_executions


def test_a_batch_round_trips_every_field(tmp_path: Path) -> None:
    store = SqliteTrajectoryStore(tmp_path / "t.db")
    parent = make_execution("plan", project_id="p1", context_snapshot={"turn": "1"})
    child = make_execution(
        "write_file", arguments={"path": "a.py", "lines": [1, 2]}, error="disk full", parent_id=parent.id,
        started_at=parent.started_at + timedelta(seconds=1), duration_ms=12.5, project_id="p1",
    )
    store.append([parent, child])
    assert store.load("test-session").executions == (parent, child)
    assert store.count() == 2


def test_executions_come_back_in_start_order_per_session(tmp_path: Path) -> None:
    store = SqliteTrajectoryStore(tmp_path / "t.db")
    first, second, third = make_executions(["a", "b", "c"])
    other = make_execution("x", session_id="other")
    store.append([third, other])
    store.append([first, second])
    assert [e.tool_name for e in store.load("test-session").executions] == ["a", "b", "c"]
    assert [e.tool_name for e in store.load("other").executions] == ["x"]
    assert store.load("nobody").executions == ()


def test_appending_a_batch_again_stores_nothing_twice(tmp_path: Path) -> None:
    store = SqliteTrajectoryStore(tmp_path / "t.db")
    batch = make_executions(["a", "b"])
    store.append(batch)
    store.append(batch)
    assert store.count() == 2


def test_distilled_hashes_persist_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    store = SqliteTrajectoryStore(path)
    store.mark_distilled("abc", "s1", 7, datetime(2026, 1, 1, tzinfo=UTC))
    store.close()
    reopened = SqliteTrajectoryStore(path)
    assert reopened.is_distilled("abc") and not reopened.is_distilled("def")


def test_the_database_uses_wal(tmp_path: Path) -> None:
    SqliteTrajectoryStore(tmp_path / "t.db")
    (mode,) = sqlite3.connect(tmp_path / "t.db").execute("PRAGMA journal_mode").fetchone()
    assert mode == "wal"
