"""The embedded AuditLog: one row per erase or export in the bot's SQLite file."""

from __future__ import annotations

import sqlite3
import threading

from agentloop.adapters.audit import audit_record, audit_row
from agentloop.adapters.sqlite.schema import Schema, Step, has_table, migrate
from agentloop.adapters.sqlite._thread import OnItsThread
from agentloop.privacy import AuditRecord

SCHEMA = Schema(
    "audit",
    (
        Step(
            "who erased or exported whose data, when, and how many rows (never content)",
            (
                """CREATE TABLE IF NOT EXISTS audit_log (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    actor TEXT NOT NULL,
                    action TEXT NOT NULL,
                    subject TEXT NOT NULL,
                    at TEXT NOT NULL,
                    counts TEXT NOT NULL
                )""",
            ),
        ),
    ),
    has_table("audit_log"),
)


class SqliteAuditLog:
    """Audit rows, appended only."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.Lock | None = None) -> None:
        """On `conn`; stores sharing one connection share its `lock` too."""
        self._conn = conn
        self._lock = lock or threading.Lock()
        migrate(conn, SCHEMA)

    def record(self, record: AuditRecord) -> None:
        with self._lock:
            self._conn.execute("INSERT INTO audit_log (actor, action, subject, at, counts) VALUES (?, ?, ?, ?, ?)", audit_row(record))

    def records(self) -> list[AuditRecord]:
        with self._lock:
            rows = self._conn.execute("SELECT actor, action, subject, at, counts FROM audit_log ORDER BY seq").fetchall()
        return [audit_record(*row) for row in rows]

    def close(self) -> None:
        self._conn.close()


class AsyncSqliteAuditLog(OnItsThread[SqliteAuditLog]):
    """The AuditLog port on a `SqliteAuditLog` (`engine`)."""

    async def record(self, record: AuditRecord) -> None:
        await self._thread.write(self.engine.record, record)

    async def records(self) -> list[AuditRecord]:
        return await self._thread.read(self.engine.records)
