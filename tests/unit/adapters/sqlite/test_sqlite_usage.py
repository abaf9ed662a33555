"""The SQLite usage table: a user's calls found through the sessions they are in, kept by a trigger, so a
turn's commit writes no page of an index by user."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import attrs
import pytest

from agentloop.adapters.sqlite.usage import TABLES, SqliteUsageStore
from agentloop.messages import Usage
from agentloop.ports import RecordedCall, UsageFilter, UsageRecord
from agentloop.privacy import Subject
from agentloop.scopes import Scope

AT = datetime(2026, 11, 26, 9, 30, tzinfo=UTC)
CALL = RecordedCall("m-1", Usage(100, 10), 0.5)


def ada(session: str, *, org: str = "o1") -> Scope:
    return Scope("acme", org, None, None, "ada", session)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteUsageStore]:
    store = SqliteUsageStore.open(tmp_path / "usage.sqlite3")
    yield store
    store.close()


def _sessions(store: SqliteUsageStore) -> list[tuple[str | None, ...]]:
    return store._conn.execute("SELECT scope_org, scope_user, scope_session FROM usage_sessions ORDER BY rowid").fetchall()


def test_a_session_is_listed_once_for_its_first_call_and_again_for_another_chain_or_user(store: SqliteUsageStore) -> None:
    for turn in ("t1", "t2", "t3"):
        store.record(UsageRecord(turn, ada("s1"), AT, (CALL, CALL)))
    store.record(UsageRecord("t4", ada("s1", org="o2"), AT, (CALL,)))  # the same session id in another org
    store.record(UsageRecord("t5", Scope("acme", "o1", None, None, None, "s1"), AT, (CALL,)))  # and without a user
    assert _sessions(store) == [("o1", "ada", "s1"), ("o2", "ada", "s1"), ("o1", None, "s1")]


def test_a_users_calls_are_read_by_key_through_their_sessions(store: SqliteUsageStore) -> None:
    where, params = TABLES[0].where(Subject.user("ada", company_id="acme", org_id="o1"))
    plan = " ".join(row[3] for row in store._conn.execute(f"EXPLAIN QUERY PLAN SELECT * FROM usage_calls WHERE {where}", params))
    assert "SCAN usage_calls" not in plan and "usage_calls USING" in plan, plan
    assert "usage_sessions USING INDEX usage_sessions_by_scope_user" in plan, plan


def test_erasing_a_user_takes_their_calls_and_sessions_and_leaves_the_others(store: SqliteUsageStore) -> None:
    bob = Scope("acme", "o1", None, None, "bob", "s9")
    for turn, scope in (("t1", ada("s1")), ("t2", ada("s2")), ("t3", bob), ("t4", ada("s1", org="o2"))):
        store.record(UsageRecord(turn, scope, AT, (CALL,)))
    assert store.total(UsageFilter(company_id="acme", user_id="ada")).calls == 3

    assert store.erase(Subject.user("ada", company_id="acme", org_id="o1")) == 2  # calls, not the sessions listing them
    assert store.total(UsageFilter(company_id="acme", user_id="ada")).calls == 1  # the other org's
    assert store.total(UsageFilter(company_id="acme", user_id="bob")).calls == 1
    assert _sessions(store) == [("o1", "bob", "s9"), ("o2", "ada", "s1")]

    store.record(UsageRecord("t5", ada("s1"), AT, (CALL,)))  # ada comes back: listed again, found again
    assert store.total(UsageFilter(company_id="acme", org_id="o1", user_id="ada")).calls == 1


def test_later_calls_of_a_listed_session_add_no_row_and_the_calls_keep_no_index_by_user(store: SqliteUsageStore) -> None:
    """The point of the sessions table: a turn's commit writes the calls' own B-tree only (one: WITHOUT ROWID)."""
    store.record(UsageRecord("t0", ada("s1"), AT, (CALL,)))
    for turn in range(1, 20):
        store.record(UsageRecord(f"t{turn}", ada("s1"), AT, (CALL,)))
    assert _sessions(store) == [("o1", "ada", "s1")]
    kept = {name for (name,) in store._conn.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'usage_calls'")}
    assert kept == {"usage_calls", "usage_calls_session"}  # the table, which is its key's B-tree, and the trigger
    assert store._conn.execute("SELECT wr FROM pragma_table_list WHERE name = 'usage_calls'").fetchone() == (1,)


def test_a_calls_time_is_kept_as_utc_text_whatever_the_zone_it_came_in() -> None:
    from datetime import timedelta, timezone

    from agentloop.adapters.usage import utc_text

    assert utc_text(datetime(2026, 11, 26, 9, 30, 5, 7, tzinfo=UTC)) == "2026-11-26T09:30:05.000007Z"
    assert utc_text(datetime(2026, 11, 26, 0, 30, tzinfo=timezone(timedelta(hours=2)))) == "2026-11-25T22:30:00.000000Z"


def test_a_session_is_looked_up_in_one_covering_index_when_a_call_is_recorded(store: SqliteUsageStore) -> None:
    """What the trigger asks on every call: answered from the index by chain, without reading the table."""
    plan = " ".join(row[3] for row in store._conn.execute(
        "EXPLAIN QUERY PLAN SELECT 1 FROM usage_sessions WHERE scope_session = ? AND scope_company IS ? AND scope_org IS ? "
        "AND scope_team IS ? AND scope_project IS ? AND scope_user IS ?", ("s1", "acme", "o1", None, None, "ada")))
    assert "COVERING INDEX usage_sessions_by_chain" in plan, plan


def test_an_export_pages_through_the_calls_by_their_key_and_gives_each_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from agentloop.adapters.sqlite import _subjects
    from agentloop.adapters.sqlite._thread import SqliteFile
    from agentloop.adapters.sqlite.usage import AsyncSqliteUsageStore

    monkeypatch.setattr(_subjects, "PAGE", 2)  # pages end inside a turn and inside a session
    file = SqliteFile(tmp_path / "bot.sqlite3")
    subject = attrs.evolve(Subject.user("ada", company_id="acme", org_id="o1"), sessions=frozenset({"s1", "s2", "s3"}))
    assert len(TABLES[0].clauses(subject)) > 1  # as an erase resolves a user: their rows, or their sessions' (OR)
    usage = AsyncSqliteUsageStore(SqliteUsageStore(file.conn, file.lock), file.thread)
    try:
        for session, turn in (("s2", "t1"), ("s1", "t2"), ("s1", "t1"), ("s3", "t3")):
            usage.engine.record(UsageRecord(turn, ada(session), AT, (CALL, CALL, CALL)))
        usage.engine.record(UsageRecord("t9", Scope("acme", "o1", None, None, "bob", "s9"), AT, (CALL,)))

        async def exported() -> list[dict[str, object]]:
            rows = []
            async for row in usage.export(subject):
                rows.append(row)
                if len(rows) > 100:  # an export whose pages start over never ends: stop and fail
                    break
            return rows

        rows = asyncio.run(exported())
    finally:
        file.close()
    keys = [(row["scope"]["session_id"], row["turn_id"], row["call_index"]) for row in rows]  # type: ignore[index]
    assert keys == sorted((session, turn, call) for session, turn in (("s2", "t1"), ("s1", "t2"), ("s1", "t1"), ("s3", "t3"))
                          for call in range(3))
    assert all("page_key" not in row for row in rows)


def test_a_call_without_a_session_is_refused_by_the_key_so_an_erase_never_misses_one(store: SqliteUsageStore) -> None:
    """Sessions are compared with `=` to find a user's calls: a NULL one, written by hand, would hide from an erase."""
    import sqlite3

    with pytest.raises(sqlite3.IntegrityError, match="NOT NULL"):
        store._conn.execute("INSERT INTO usage_calls (turn_id, call_index, scope_company, scope_user, at, day, input_tokens, "
                            "output_tokens, cache_read_tokens, cache_write_tokens) VALUES ('t', 0, 'acme', 'ada', '', '', 1, 1, 0, 0)")
    store.record(UsageRecord("t1", Scope("acme", "o1", None, None, "ada", None), AT, (CALL,)))  # no session: kept under ''
    assert store.erase(Subject.user("ada", company_id="acme", org_id="o1")) == 1


def test_a_call_kept_without_a_session_before_the_key_refused_one_is_kept_once_and_erased(tmp_path: Path) -> None:
    from agentloop.adapters.sqlite import usage as sqlite_usage
    from agentloop.adapters.sqlite._connection import connect
    from agentloop.adapters.sqlite.schema import Schema, migrate

    path = tmp_path / "usage.sqlite3"
    conn = connect(path)
    migrate(conn, Schema("usage", sqlite_usage.SCHEMA.steps[:6], sqlite_usage.SCHEMA.detect))
    for _ in range(2):  # one turn written twice: a NULL session in the key let it in twice
        conn.execute("INSERT INTO usage_calls (turn_id, call_index, scope_company, scope_org, scope_user, at, day, input_tokens, "
                     "output_tokens, cache_read_tokens, cache_write_tokens) VALUES ('t0', 0, 'acme', 'o1', 'ada', '', '', 1, 1, 0, 0)")
    conn.close()
    store = SqliteUsageStore.open(path)
    try:
        assert _sessions(store) == [("o1", "ada", "")]
        assert store.erase(Subject.user("ada", company_id="acme", org_id="o1")) == 1
    finally:
        store.close()
