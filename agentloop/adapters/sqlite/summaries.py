"""The embedded SummaryStore: each session's compacted history, versioned, in a table of the bot's file."""

from __future__ import annotations

import sqlite3
import threading
from datetime import datetime
from pathlib import Path

from agentloop.adapters.rows import scope_values
from agentloop.adapters.sqlite.connection import closing_on_error, connect, transaction
from agentloop.adapters.sqlite.schema import Schema, Step, has_table, migrate
from agentloop.adapters.sqlite.scopes import SCOPE_COLUMNS_DDL, SCOPE_COLUMNS_SQL, SCOPE_MATCH
from agentloop.adapters.sqlite.thread import OnItsThread
from agentloop.ports.summaries import SessionSummary
from agentloop.scopes import Scope

SCHEMA = Schema(
    "summaries",
    (
        Step(
            "each session's summaries, one row a version",
            (
                f"""CREATE TABLE session_summaries (
                    {SCOPE_COLUMNS_DDL},
                    version INTEGER NOT NULL,
                    covered INTEGER NOT NULL,
                    text TEXT NOT NULL,
                    created_at TEXT NOT NULL
                )""",
                f"CREATE UNIQUE INDEX session_summaries_by_version ON session_summaries (scope_session, {SCOPE_COLUMNS_SQL}, version)",
            ),
        ),
    ),
    has_table("session_summaries"),
)
_COLUMNS = "version, covered, text, created_at"


class SqliteSummaryStore:
    """Summaries by history scope; a version is added in a transaction that checks the one before it."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.Lock | None = None) -> None:
        """On `conn`; stores sharing one connection share its `lock` too."""
        self._conn = conn
        self._lock = lock or threading.Lock()
        migrate(conn, SCHEMA)

    @classmethod
    def open(cls, path: str | Path) -> SqliteSummaryStore:
        with closing_on_error(connect(path)) as conn:
            return cls(conn)

    def add(self, summary: SessionSummary) -> bool:
        chain = scope_values(summary.scope)
        with self._lock, transaction(self._conn):
            (latest,) = self._conn.execute(
                f"SELECT coalesce(max(version), 0) FROM session_summaries WHERE {SCOPE_MATCH}", chain
            ).fetchone()
            if latest != summary.version - 1:
                return False
            self._conn.execute(
                f"INSERT INTO session_summaries ({SCOPE_COLUMNS_SQL}, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*chain, summary.version, summary.covered, summary.text, summary.created_at.isoformat()),
            )
        return True

    def latest(self, scope: Scope) -> SessionSummary | None:
        found = self._read(scope, "ORDER BY version DESC LIMIT 1")
        return found[0] if found else None

    def versions(self, scope: Scope) -> tuple[SessionSummary, ...]:
        return self._read(scope, "ORDER BY version")

    def _read(self, scope: Scope, order: str) -> tuple[SessionSummary, ...]:
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_COLUMNS} FROM session_summaries WHERE {SCOPE_MATCH} {order}", scope_values(scope)
            ).fetchall()
        return tuple(
            SessionSummary(scope, version, covered, text, datetime.fromisoformat(at)) for version, covered, text, at in rows
        )

    def close(self) -> None:
        self._conn.close()


class AsyncSqliteSummaryStore(OnItsThread[SqliteSummaryStore]):
    """The SummaryStore port on a `SqliteSummaryStore` (`engine`)."""

    async def add(self, summary: SessionSummary) -> bool:
        return await self._thread.write(self.engine.add, summary)

    async def latest(self, scope: Scope) -> SessionSummary | None:
        return await self._thread.read(self.engine.latest, scope)

    async def versions(self, scope: Scope) -> tuple[SessionSummary, ...]:
        return await self._thread.read(self.engine.versions, scope)
