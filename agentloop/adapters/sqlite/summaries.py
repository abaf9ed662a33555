"""The embedded SummaryStore: each session's compacted history, versioned, in a table of the bot's file."""

from __future__ import annotations

from collections.abc import AsyncIterator

from typing import Any

import functools
import sqlite3
import threading
from collections import OrderedDict
from datetime import datetime
from pathlib import Path

from agentloop.adapters._rows import scope_values
from agentloop.adapters.sqlite._connection import closing_on_error, connect, data_version, on_commit, transaction
from agentloop.adapters.sqlite.schema import Schema, Step, has_table, migrate
from agentloop.adapters.sqlite._scopes import SCOPE_COLUMNS_DDL, SCOPE_COLUMNS_SQL, SCOPE_MATCH
from agentloop.adapters.sqlite._thread import OnItsThread
from agentloop.adapters.sqlite._subjects import Table, delete_rows, export_page, export_rows, subject_indexes
from agentloop.adapters._subjects import SCOPED
from agentloop.privacy import Subject
from agentloop.ports.summaries import SessionSummary
from agentloop.scopes import Scope

TABLES = (Table("summary", "session_summaries", SCOPED, indexed=("scope_session",)),)
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
        subject_indexes(*TABLES),
    ),
    has_table("session_summaries"),
)
_COLUMNS = "version, covered, text, created_at"

LATEST_KEPT = 1024
"""How many histories' latest summary (or its absence) a store keeps in memory, the most recently read."""


class SqliteSummaryStore:
    """Summaries by history scope; a version is added in a transaction that checks the one before it.

    The latest summary of each of `LATEST_KEPT` scopes (None before the first) is kept in
    memory once read, and replaced by this store's adds once they commit, so a turn reads it
    without a query. Another connection's commit to the file (`PRAGMA data_version`) drops them all.
    """

    def __init__(self, conn: sqlite3.Connection, lock: threading.Lock | None = None) -> None:
        """On `conn`; stores sharing one connection share its `lock` too."""
        self._conn = conn
        self._lock = lock or threading.Lock()
        migrate(conn, SCHEMA)
        self._latest: OrderedDict[Scope, SessionSummary | None] = OrderedDict()
        self._version = data_version(conn)

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
                self._latest.pop(summary.scope, None)
                return False
            self._conn.execute(
                f"INSERT INTO session_summaries ({SCOPE_COLUMNS_SQL}, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*chain, summary.version, summary.covered, summary.text, summary.created_at.isoformat()),
            )
            on_commit(self._conn, functools.partial(self._keep, summary.scope, summary))
        return True

    def latest(self, scope: Scope) -> SessionSummary | None:
        with self._lock:
            version = data_version(self._conn)
            if version != self._version:
                self._version = version
                self._latest.clear()
            if scope in self._latest:
                self._latest.move_to_end(scope)
                return self._latest[scope]
            found = self._select(scope, "ORDER BY version DESC LIMIT 1")
            latest = found[0] if found else None
            on_commit(self._conn, functools.partial(self._keep, scope, latest))
        return latest

    def _keep(self, scope: Scope, latest: SessionSummary | None) -> None:
        self._latest[scope] = latest
        self._latest.move_to_end(scope)
        if len(self._latest) > LATEST_KEPT:
            self._latest.popitem(last=False)

    def versions(self, scope: Scope) -> tuple[SessionSummary, ...]:
        return self._read(scope, "ORDER BY version")

    def _read(self, scope: Scope, order: str) -> tuple[SessionSummary, ...]:
        with self._lock:
            return self._select(scope, order)

    def _select(self, scope: Scope, order: str) -> tuple[SessionSummary, ...]:
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM session_summaries WHERE {SCOPE_MATCH} {order}", scope_values(scope)
        ).fetchall()
        return tuple(
            SessionSummary(scope, version, covered, text, datetime.fromisoformat(at)) for version, covered, text, at in rows
        )

    def erase(self, subject: Subject) -> int:
        """Delete `subject`'s rows, in one transaction; how many."""
        with self._lock, transaction(self._conn):
            removed = delete_rows(self._conn, subject, TABLES)
            on_commit(self._conn, self._latest.clear)
        return removed

    def export_page(self, subject: Subject, table: Table, after: object) -> list[dict[str, Any]]:
        return export_page(self._conn, self._lock, subject, table, after)

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

    async def erase(self, subject: Subject) -> int:
        return await self._thread.write(self.engine.erase, subject)

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        return export_rows(self._thread, self.engine.export_page, subject, TABLES)
