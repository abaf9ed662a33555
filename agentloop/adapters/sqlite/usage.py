"""The embedded UsageStore: one row per model call in a SQLite table of the bot's file.

Every turn writes the table and only reports read it, so it is one B-tree (WITHOUT ROWID): the rows
in the order of their key, session, turn and call (a turn recorded once; a session's rows). Each index
more would add a page to the commit of every turn. A user's rows are found through `usage_sessions`, the
sessions each user's calls are in, which a trigger adds a row to only for a session's first call; a
report sums by reading through the rows its filter does not find by key.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from pathlib import Path
from collections.abc import AsyncIterator, Sequence
from typing import Any

from agentloop.adapters._rows import SCOPE_COLUMNS
from agentloop.adapters.sqlite._connection import closing_on_error, connect, transaction
from agentloop.adapters.sqlite.schema import Schema, Step, has_table, migrate
from agentloop.adapters.sqlite._scopes import SCOPE_COLUMNS_DDL, SCOPE_COLUMNS_SQL
from agentloop.adapters.sqlite._thread import OnItsThread
from agentloop.adapters.sqlite._subjects import Table, delete_rows, export_page, export_rows, subject_indexes
from agentloop.adapters._subjects import SCOPED
from agentloop.privacy import Subject
from agentloop.adapters.usage import KEYS, SUMS, fits_sql, in_key_order, summed, utc_text
from agentloop.ports.usage import Charge, Spent, UsageFilter, UsageGroup, UsageLine, UsageRecord, UsageTotal

TABLES = (
    Table("call", "usage_calls", SCOPED, indexed=("scope_session",), key=("scope_session", "turn_id", "call_index"),
          user_sessions="usage_sessions"),
    Table("session", "usage_sessions", SCOPED),
)
"""The calls, exported and erased; the sessions each user's calls are in, erased with them."""
_MATCH_NEW = " AND ".join(f"{column} IS NEW.{column}" for column in SCOPE_COLUMNS)
_COLUMNS = f"turn_id, call_index, {SCOPE_COLUMNS_SQL}, at, day, model, input_tokens, output_tokens, cache_read_tokens, " \
    "cache_write_tokens, cost, calls"
_CALL_DDL = f"""turn_id TEXT NOT NULL,
                    call_index INTEGER NOT NULL,
                    {SCOPE_COLUMNS_DDL},
                    at TEXT NOT NULL,
                    day TEXT NOT NULL,
                    model TEXT,
                    input_tokens INTEGER NOT NULL,
                    output_tokens INTEGER NOT NULL,
                    cache_read_tokens INTEGER NOT NULL,
                    cache_write_tokens INTEGER NOT NULL,
                    cost REAL"""
"""A call's columns as the table's first step made them (the later steps add `calls`)."""
_NO_SESSION = "coalesce(scope_session, '') AS scope_session"
"""A call recorded without a session is kept under the session id '': NULLs in a key are all distinct,
so the key would not see the same turn written again."""
_LIST_SESSION = f"""CREATE TRIGGER usage_calls_session AFTER INSERT ON usage_calls
    WHEN NOT EXISTS (SELECT 1 FROM usage_sessions WHERE scope_session = NEW.scope_session AND {_MATCH_NEW})
    BEGIN
        INSERT INTO usage_sessions ({SCOPE_COLUMNS_SQL}) VALUES ({", ".join(f"NEW.{c}" for c in SCOPE_COLUMNS)});
    END"""
"""The trigger that lists a call's session (with its chain) in `usage_sessions` on the session's first call."""
SCHEMA = Schema(
    "usage",
    (
        Step(
            "the tokens and cost of each model call, per turn",
            (
                f"""CREATE TABLE IF NOT EXISTS usage_calls (
                    {_CALL_DDL},
                    PRIMARY KEY (turn_id, call_index)
                )""",
                "CREATE INDEX IF NOT EXISTS usage_calls_by_tenant "
                "ON usage_calls (scope_company, scope_org, scope_team, scope_project, at)",
                "CREATE INDEX IF NOT EXISTS usage_calls_by_user ON usage_calls (scope_company, scope_user, at)",
                "CREATE INDEX IF NOT EXISTS usage_calls_by_session ON usage_calls (scope_session, at)",
            ),
        ),
        Step(
            "a ledger line per budget and period: the tokens and dollars reserved or spent",
            ("CREATE TABLE IF NOT EXISTS budget_ledger (key TEXT PRIMARY KEY, tokens INTEGER NOT NULL, cost REAL NOT NULL)",),
        ),
        subject_indexes(TABLES[0]),
        Step(
            "a row may sum several calls (retention rolls old days up), so each counts its calls",
            ("ALTER TABLE usage_calls ADD COLUMN calls INTEGER NOT NULL DEFAULT 1",),
        ),
        Step(
            "every turn writes the table and only reports read it: keyed session first, so the key also finds a "
            "session's rows, and no index a write or an erase does not need, as each costs the turn a page of its commit",
            (
                f"""CREATE TABLE usage_calls_keyed (
                    {_CALL_DDL},
                    calls INTEGER NOT NULL DEFAULT 1,
                    PRIMARY KEY (scope_session, turn_id, call_index)
                )""",
                f"INSERT INTO usage_calls_keyed ({_COLUMNS}) SELECT {_COLUMNS.replace('scope_session', _NO_SESSION)} FROM usage_calls",
                "DROP TABLE usage_calls",
                "ALTER TABLE usage_calls_keyed RENAME TO usage_calls",
                "CREATE INDEX usage_calls_by_scope_user ON usage_calls (scope_user)",
            ),
        ),
        # A call's scope_session is never NULL (`record` and step 5 write '' for none; from step 7 the key refuses
        # NULL): the trigger and the lookup through `usage_sessions` compare sessions with `=`, as the key does.
        Step(
            "the sessions of each user's calls, kept by a trigger: an erase finds a user's calls through them, so a "
            "turn's commit no longer writes a page of an index by user (one row per session, written once)",
            (
                f"CREATE TABLE usage_sessions ({SCOPE_COLUMNS_DDL})",
                f"INSERT INTO usage_sessions ({SCOPE_COLUMNS_SQL}) SELECT DISTINCT {SCOPE_COLUMNS_SQL} FROM usage_calls",
                "CREATE INDEX usage_sessions_by_scope_session ON usage_sessions (scope_session)",
                "CREATE INDEX usage_sessions_by_scope_user ON usage_sessions (scope_user)",
                _LIST_SESSION,
                "DROP INDEX usage_calls_by_scope_user",
            ),
        ),
        Step(
            "the calls kept in their key's B-tree alone (WITHOUT ROWID), and a session's listing found in one index: "
            "a turn's write then touches one B-tree of calls, not a table and its key",
            (
                f"""CREATE TABLE usage_calls_keyed (
                    {_CALL_DDL},
                    calls INTEGER NOT NULL DEFAULT 1,
                    PRIMARY KEY (scope_session, turn_id, call_index)
                ) WITHOUT ROWID""",
                # A turn kept twice under a NULL session (NULLs in a key are all distinct) is kept once under ''.
                f"INSERT OR IGNORE INTO usage_calls_keyed ({_COLUMNS}) SELECT {_COLUMNS.replace('scope_session', _NO_SESSION)} "
                "FROM usage_calls",
                "DROP TABLE usage_calls",  # and its trigger
                "ALTER TABLE usage_calls_keyed RENAME TO usage_calls",
                # The sessions of the calls kept under '' listed again (a NULL session was listed once per call).
                "DELETE FROM usage_sessions WHERE scope_session IS NULL OR scope_session = ''",
                f"INSERT INTO usage_sessions ({SCOPE_COLUMNS_SQL}) SELECT DISTINCT {SCOPE_COLUMNS_SQL} FROM usage_calls "
                "WHERE scope_session = ''",
                _LIST_SESSION,
                f"CREATE INDEX usage_sessions_by_chain ON usage_sessions (scope_session, {', '.join(SCOPE_COLUMNS[:-1])})",
                "DROP INDEX usage_sessions_by_scope_session",
            ),
        ),
    ),
    has_table("usage_calls"),
)

@functools.lru_cache(maxsize=64)
def _insert(rows: int) -> str:
    """The statement that records a turn of `rows` calls (made once per count: every turn records one)."""
    marks = ", ".join(f"({', '.join('?' * 16)})" for _ in range(rows))
    return (
        f"INSERT OR IGNORE INTO usage_calls (turn_id, {SCOPE_COLUMNS_SQL}, call_index, at, day, model, input_tokens, "
        f"output_tokens, cache_read_tokens, cache_write_tokens, cost) VALUES {marks}"
    )


def _where(where: UsageFilter) -> tuple[str, list[Any]]:
    conditions, params = ["1 = 1"], list[Any]()
    for column, value in zip(SCOPE_COLUMNS, where.ids, strict=True):
        if value is not None:
            conditions.append(f"{column} = ?")
            params.append(value)
    *_, user, session = where.ids
    if user is not None and session is None:  # the user's sessions, then their rows by key
        conditions.append("scope_session IN (SELECT scope_session FROM usage_sessions WHERE scope_user = ?)")
        params.append(user)
    if where.since is not None:
        conditions.append("at >= ?")
        params.append(utc_text(where.since))
    if where.until is not None:
        conditions.append("at < ?")
        params.append(utc_text(where.until))
    return " AND ".join(conditions), params


class SqliteUsageStore:
    """Usage rows keyed by (session, turn, call): a turn's rows go in one statement, and a turn already
    there is not written again."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.Lock | None = None) -> None:
        """On `conn`; stores sharing one connection share its `lock` too."""
        self._conn = conn
        self._lock = lock or threading.Lock()
        migrate(conn, SCHEMA)

    @classmethod
    def open(cls, path: str | Path) -> SqliteUsageStore:
        with closing_on_error(connect(path)) as conn:
            return cls(conn)

    def record(self, record: UsageRecord) -> bool:
        if not record.calls:
            return False
        at, scope = utc_text(record.at), record.scope
        turn = (record.turn_id, scope.company_id, scope.org_id, scope.team_id, scope.project_id, scope.user_id, scope.session_id or "")
        values: list[Any] = []
        for index, call in enumerate(record.calls):
            usage = call.usage
            values += (*turn, index, at, at[:10], call.model, usage.input_tokens, usage.output_tokens,
                       usage.cache_read_tokens, usage.cache_write_tokens, call.cost)
        with self._lock:  # one statement: its rows land together or not at all
            cursor = self._conn.execute(_insert(len(record.calls)), values)
        return cursor.rowcount > 0

    def total(self, where: UsageFilter) -> UsageTotal:
        condition, params = _where(where)
        with self._lock:
            row = self._conn.execute(f"SELECT {SUMS} FROM usage_calls WHERE {condition}", params).fetchone()
        return summed(row)

    def report(self, where: UsageFilter, by: UsageGroup) -> list[UsageLine]:
        condition, params = _where(where)
        key = KEYS[by]
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {key} AS k, {SUMS} FROM usage_calls WHERE {condition} GROUP BY k ORDER BY k", params
            ).fetchall()
        return [UsageLine(str(row[0]), summed(row[1:])) for row in rows]

    def reserve(self, charges: Sequence[Charge]) -> Charge | None:
        with self._lock:
            try:
                with transaction(self._conn):  # BEGIN IMMEDIATE: no other process writes the ledger meanwhile
                    for charge in in_key_order(charges):
                        if not self._charge(charge, checked=True):
                            raise _Refused(charge)
            except _Refused as refused:
                return refused.charge
        return None

    def spend(self, charges: Sequence[Charge]) -> None:
        with self._lock, transaction(self._conn):
            for charge in in_key_order(charges):
                self._charge(charge, checked=False)

    def spent(self, key: str) -> Spent:
        with self._lock:
            row = self._conn.execute("SELECT tokens, cost FROM budget_ledger WHERE key = ?", (key,)).fetchone()
        return Spent() if row is None else Spent(int(row[0]), float(row[1]))

    def _charge(self, charge: Charge, *, checked: bool) -> bool:
        self._conn.execute("INSERT OR IGNORE INTO budget_ledger (key, tokens, cost) VALUES (?, 0, 0)", (charge.key,))
        condition, params = fits_sql(charge, "?") if checked else ("1 = 1", [])
        cursor = self._conn.execute(
            f"UPDATE budget_ledger SET tokens = tokens + ?, cost = cost + ? WHERE key = ? AND {condition}",
            [charge.tokens, charge.cost, charge.key, *params],
        )
        return cursor.rowcount > 0

    def erase(self, subject: Subject) -> int:
        """Delete `subject`'s calls and the sessions they were in, in one transaction; how many calls."""
        with self._lock, transaction(self._conn):
            calls = delete_rows(self._conn, subject, TABLES[:1])
            delete_rows(self._conn, subject, TABLES[1:])
        return calls

    def export_page(self, subject: Subject, table: Table, after: object) -> list[dict[str, Any]]:
        return export_page(self._conn, self._lock, subject, table, after)

    def close(self) -> None:
        self._conn.close()


class _Refused(Exception):
    """A charge that does not fit: the reservation's transaction rolls back."""

    def __init__(self, charge: Charge) -> None:
        super().__init__(charge.key)
        self.charge = charge


class AsyncSqliteUsageStore(OnItsThread[SqliteUsageStore]):
    """The UsageStore port on a `SqliteUsageStore` (`engine`)."""

    async def record(self, record: UsageRecord) -> bool:
        return await self._thread.write(self.engine.record, record)

    async def total(self, where: UsageFilter) -> UsageTotal:
        return await self._thread.read(self.engine.total, where)

    async def report(self, where: UsageFilter, by: UsageGroup) -> list[UsageLine]:
        return await self._thread.read(self.engine.report, where, by)

    async def reserve(self, charges: Sequence[Charge]) -> Charge | None:
        return await self._thread.write(self.engine.reserve, charges)

    async def spend(self, charges: Sequence[Charge]) -> None:
        await self._thread.write(self.engine.spend, charges)

    async def spent(self, key: str) -> Spent:
        return await self._thread.read(self.engine.spent, key)

    async def erase(self, subject: Subject) -> int:
        return await self._thread.write(self.engine.erase, subject)

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        return export_rows(self._thread, self.engine.export_page, subject, TABLES[:1])
