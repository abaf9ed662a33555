"""SqliteTrajectoryStore: what is particular to SQLite (the port's contract is checked by the
conformance suite, tests/unit/test_store_conformance.py; migrating release 0.1 files by
test_sqlite_schema.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agentloop.adapters import SqliteTrajectoryStore
from agentloop.testing.notes import make_execution


def test_the_database_uses_wal(tmp_path: Path) -> None:
    SqliteTrajectoryStore(tmp_path / "t.db")
    (mode,) = sqlite3.connect(tmp_path / "t.db").execute("PRAGMA journal_mode").fetchone()
    assert mode == "wal"


def test_a_batch_is_written_by_one_insert_so_the_writer_seldom_takes_the_gil_back(tmp_path: Path) -> None:
    store = SqliteTrajectoryStore(tmp_path / "t.db")
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    store.append([make_execution("search", session_id="s1") for _ in range(50)])
    assert sum(statement.startswith("INSERT") for statement in statements) == 1
    assert len(store.load("s1").executions) == 50


def test_a_batch_larger_than_one_statement_may_hold_is_written_whole(tmp_path: Path) -> None:
    store = SqliteTrajectoryStore(tmp_path / "t.db")
    store._conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 40)  # two executions' columns per statement
    executions = [make_execution("search", session_id="s1", arguments={"q": i}) for i in range(5)]
    store.append(executions)
    assert sorted(e.id for e in store.load("s1").executions) == sorted(e.id for e in executions)
