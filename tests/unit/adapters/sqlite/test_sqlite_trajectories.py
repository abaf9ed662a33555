"""SqliteTrajectoryStore: what is particular to SQLite (the port's contract is checked by the
conformance suite, tests/unit/adapters/test_store_conformance.py; migrating release 0.1 files by
test_sqlite_schema.py)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import pytest

from agentloop.adapters import SqliteTrajectoryStore
from agentloop.adapters.sqlite._connection import connect
from agentloop.adapters.sqlite.schema import migrate
from agentloop.adapters.sqlite.trajectories import _COLUMNS, _ROW, SCHEMA, _add_row
from agentloop.testing.notes import make_execution

AT = datetime(2026, 1, 1, tzinfo=UTC)


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


def test_a_file_from_before_the_single_index_keeps_its_executions_and_skips_them_when_sent_again(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    conn = connect(path)
    migrate(conn, attrs.evolve(SCHEMA, steps=SCHEMA.steps[:3]))  # the shape of the release before
    first, second, later = (
        make_execution(name, session_id="s1", started_at=AT + timedelta(seconds=i)) for i, name in enumerate(["a", "b", "c"])
    )
    values: list[object] = []
    for execution in (second, first):
        _add_row(values, execution)
    conn.execute(f"INSERT INTO tool_executions ({_COLUMNS}) VALUES {_ROW}, {_ROW}", values)
    conn.close()
    store = SqliteTrajectoryStore(path)
    store.append([first, later])
    assert store.load("s1").executions == (first, second, later) and store.count() == 3
    indexes = store._conn.execute("SELECT name FROM pragma_index_list('tool_executions')").fetchall()
    assert sorted(name for (name,) in indexes) == ["tool_executions_by_session_start", "tool_executions_by_user"]


def test_an_execution_whose_arguments_contain_themselves_is_refused_as_a_value_error(tmp_path: Path) -> None:
    """A ValueError blames the execution, so capture quarantines it rather than retrying it."""
    looped: dict[str, object] = {}
    looped["self"] = looped
    store = SqliteTrajectoryStore(tmp_path / "t.db")
    with pytest.raises(ValueError, match="contains itself"):
        store.append([make_execution("search", arguments=looped), make_execution("fine")])
    assert store.count() == 0


def test_texts_that_look_like_the_null_stand_in_come_back_as_texts_and_none_as_none(tmp_path: Path) -> None:
    store = SqliteTrajectoryStore(tmp_path / "t.db")
    made = make_execution("search", session_id="s1", parent_id="0", user_id=None, step_id="")
    zero = attrs.evolve(made, result="0", error="")
    store.append([zero])
    assert store.load("s1").executions == (zero,)
    (row,) = store._conn.execute("SELECT result, error, parent_id, user_id, step_id FROM tool_executions").fetchall()
    assert tuple(row) == ("0", "", "0", None, "")
