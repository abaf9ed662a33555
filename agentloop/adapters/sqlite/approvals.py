"""The embedded ApprovalStore: tool calls awaiting the user's approval, in a SQLite table of the bot's file."""

from __future__ import annotations

from collections.abc import AsyncIterator

from typing import Any

import functools
import json
import sqlite3
import threading
from pathlib import Path

from agentloop.adapters._rows import scope_values
from agentloop.adapters.sqlite._connection import closing_on_error, connect, transaction
from agentloop.adapters.sqlite.schema import Schema, Step, has_table, migrate
from agentloop.adapters.sqlite._scopes import SCOPE_COLUMNS_DDL, SCOPE_COLUMNS_SQL, SCOPE_MATCH
from agentloop.approvals import PendingApproval
from agentloop.outcome import converter
from agentloop.scopes import Scope
from agentloop.adapters.sqlite._thread import OnItsThread
from agentloop.adapters.sqlite._subjects import Table, erase_rows, export_page, export_rows, subject_indexes
from agentloop.adapters._subjects import SCOPED
from agentloop.privacy import Subject


TABLES = (Table("approval", "pending_approvals", SCOPED, session_column="session_id", key="seq", indexed=("session_id",)),)
SCHEMA = Schema(
    "approvals",
    (
        Step(
            "tool calls awaiting approval, each decided once",
            (
                f"""CREATE TABLE IF NOT EXISTS pending_approvals (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    approval_id TEXT NOT NULL UNIQUE,
                    {SCOPE_COLUMNS_DDL},
                    session_id TEXT NOT NULL,
                    decision TEXT,
                    taken_by TEXT,
                    pending TEXT NOT NULL
                )""",
                "CREATE INDEX IF NOT EXISTS pending_approvals_by_session "
                f"ON pending_approvals (session_id, {SCOPE_COLUMNS_SQL}, seq)",
            ),
        ),
        subject_indexes(*TABLES),
    ),
    has_table("pending_approvals"),
)
_DECISIONS = {True: "approved", False: "denied"}


def _loaded(text: str) -> PendingApproval:
    return converter.structure(json.loads(text), PendingApproval)


class SqliteApprovalStore:
    """Pending approvals as JSON (the shared converter's form) beside their scope columns; a
    decision is written once, by a compare-and-set on the undecided row."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.Lock | None = None) -> None:
        """On `conn`; stores sharing one connection share its `lock` too."""
        self._conn = conn
        self._lock = lock or threading.Lock()
        migrate(conn, SCHEMA)

    @classmethod
    def open(cls, path: str | Path) -> SqliteApprovalStore:
        with closing_on_error(connect(path)) as conn:
            return cls(conn)

    def add(self, pending: PendingApproval) -> None:
        body = json.dumps(converter.unstructure(pending))
        try:
            with self._lock:
                self._conn.execute(
                    f"INSERT INTO pending_approvals (approval_id, {SCOPE_COLUMNS_SQL}, session_id, pending) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (pending.request.approval_id, *scope_values(pending.scope), pending.request.session_id, body),
                )
        except sqlite3.IntegrityError:
            raise ValueError(f"an approval with id {pending.request.approval_id!r} is stored already") from None

    def pending(self, scope: Scope, session_id: str) -> list[PendingApproval]:
        with self._lock:
            rows = self._conn.execute(
                f"SELECT pending FROM pending_approvals WHERE session_id = ? AND {SCOPE_MATCH} AND decision IS NULL "
                "ORDER BY seq",
                (session_id, *scope_values(scope)),
            ).fetchall()
        return [_loaded(text) for (text,) in rows]

    def take(self, scope: Scope, approval_id: str, approved: bool, *, key: str | None = None) -> PendingApproval | None:
        with self._lock, transaction(self._conn):
            rows = self._conn.execute(
                f"UPDATE pending_approvals SET decision = ?, taken_by = ? WHERE approval_id = ? AND {SCOPE_MATCH} "
                "AND (decision IS NULL OR (taken_by = ? AND decision = ?)) RETURNING pending",
                (_DECISIONS[approved], key, approval_id, *scope_values(scope), key, _DECISIONS[approved]),
            ).fetchall()
        return _loaded(rows[0][0]) if rows else None

    def erase(self, subject: Subject) -> int:
        """Delete `subject`'s rows, in one transaction; how many."""
        return erase_rows(self._conn, self._lock, subject, TABLES)

    def export_page(self, subject: Subject, table: Table, after: object) -> list[dict[str, Any]]:
        return export_page(self._conn, self._lock, subject, table, after)

    def close(self) -> None:
        self._conn.close()


class AsyncSqliteApprovalStore(OnItsThread[SqliteApprovalStore]):
    """The ApprovalStore port on a `SqliteApprovalStore` (`engine`)."""

    async def add(self, pending: PendingApproval) -> None:
        await self._thread.write(self.engine.add, pending)

    async def pending(self, scope: Scope, session_id: str) -> list[PendingApproval]:
        return await self._thread.read(self.engine.pending, scope, session_id)

    async def take(self, scope: Scope, approval_id: str, approved: bool, *, key: str | None = None) -> PendingApproval | None:
        return await self._thread.write(functools.partial(self.engine.take, key=key), scope, approval_id, approved)

    async def erase(self, subject: Subject) -> int:
        return await self._thread.write(self.engine.erase, subject)

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        return export_rows(self._thread, self.engine.export_page, subject, TABLES)
