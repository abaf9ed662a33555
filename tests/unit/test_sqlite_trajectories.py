"""SqliteTrajectoryStore: round trip, ordering, idempotent batches, distilled hashes and
tenant chains (migrating release 0.1 files: test_sqlite_schema.py)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs

from agentloop.adapters import SqliteTrajectoryStore
from agentloop.scopes import Scope
from agentloop.testing.notes import make_execution, make_executions


def test_a_batch_round_trips_every_field(tmp_path: Path) -> None:
    store = SqliteTrajectoryStore(tmp_path / "t.db")
    parent = make_execution("plan", project_id="p1", context_snapshot={"turn": "1"}, org_id="o1", team_id="t1")
    child = make_execution(
        "write_file", arguments={"path": "a.py", "lines": [1, 2]}, error="disk full", parent_id=parent.id,
        started_at=parent.started_at + timedelta(seconds=1), duration_ms=12.5, project_id="p1", step_id="m1",
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


def test_a_session_id_reused_under_another_org_reads_only_its_own_chain(tmp_path: Path) -> None:
    """I11: the same session, project and user ids under two orgs are two trajectories."""
    store = SqliteTrajectoryStore(tmp_path / "t.db")
    acme = make_execution("acme_tool", session_id="s1", user_id="u1", project_id="shop", org_id="acme")
    globex = make_execution("globex_tool", session_id="s1", user_id="u1", project_id="shop", org_id="globex")
    store.append([acme, globex])
    assert store.load("s1", Scope(org_id="acme", project_id="shop", user_id="u1")).executions == (acme,)
    assert store.load("s1", Scope(org_id="globex", project_id="shop", user_id="u1")).executions == (globex,)
    assert store.load("s1", Scope(project_id="shop", user_id="u1")).executions == ()
    assert len(store.load("s1").executions) == 2
    store.close()


def test_a_session_of_the_same_chain_in_another_company_reads_only_its_own_company(tmp_path: Path) -> None:
    """I11: two companies sharing the file, with the same ids below the company, are two trajectories."""
    store = SqliteTrajectoryStore(tmp_path / "t.db")
    chain = {"session_id": "s1", "user_id": "u1", "project_id": "shop", "team_id": "web", "org_id": "acme"}
    mine = make_execution("c1_tool", **chain)
    theirs = attrs.evolve(make_execution("c2_tool", **chain), company_id="c2")
    store.append([mine, theirs])
    reader = Scope("c2", "acme", "web", "shop", "u1", "s1")
    assert store.load("s1", reader).executions == (theirs,)
    assert store.load("s1", attrs.evolve(reader, company_id="default")).executions == (mine,)
    store.close()
