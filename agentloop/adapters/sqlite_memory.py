"""The embedded MemoryStore: remembered exchanges per scope in a SQLite table."""

from __future__ import annotations

import sqlite3
import threading
from datetime import datetime
from pathlib import Path

from agentloop.adapters.sqlite import closing_on_error, connect
from agentloop.adapters.sqlite_schema import Schema, Step, migrate
from agentloop.adapters.rows import scope_values
from agentloop.adapters.sqlite_scopes import (
    SCOPE_COLUMNS_DDL,
    SCOPE_COLUMNS_SQL,
    SCOPE_MATCH,
    scope_columns_step,
    scoped_version,
)
from agentloop.ports.stores import MemoryEntry
from agentloop.scopes import Scope

_ENTRY_COLUMNS = ("session_id", "user_text", "assistant_text", "created_at")
_SCOPED = (
    f"""CREATE TABLE memory_entries (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        {SCOPE_COLUMNS_DDL},
        session_id TEXT NOT NULL,
        user_text TEXT NOT NULL,
        assistant_text TEXT NOT NULL,
        created_at TEXT NOT NULL
    )""",
    f"CREATE INDEX memory_entries_by_scope ON memory_entries ({SCOPE_COLUMNS_SQL}, id, session_id)",
)
SCHEMA = Schema(
    "memory",
    (
        Step(
            "memory under one scope text (release 0.1)",
            (
                """CREATE TABLE IF NOT EXISTS memory_entries (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    scope TEXT NOT NULL,
                    session_id TEXT NOT NULL,
                    user_text TEXT NOT NULL,
                    assistant_text TEXT NOT NULL,
                    created_at TEXT NOT NULL
                )""",
                "CREATE INDEX IF NOT EXISTS memory_entries_by_scope_session ON memory_entries (scope, id, session_id)",
            ),
        ),
        scope_columns_step("memory_entries", _SCOPED, _ENTRY_COLUMNS),
    ),
    scoped_version("memory_entries"),
)


class SqliteMemoryStore:
    """Append-only memory; `recent` reads the newest entries of a scope."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.Lock | None = None) -> None:
        """On `conn`; stores sharing one connection share its `lock` too."""
        self._conn = conn
        self._lock = lock or threading.Lock()
        migrate(conn, SCHEMA)

    @classmethod
    def open(cls, path: str | Path) -> SqliteMemoryStore:
        with closing_on_error(connect(path)) as conn:
            return cls(conn)

    def add(self, entry: MemoryEntry) -> None:
        with self._lock:
            self._conn.execute(
                f"INSERT INTO memory_entries ({SCOPE_COLUMNS_SQL}, {', '.join(_ENTRY_COLUMNS)}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    *scope_values(entry.scope),
                    entry.session_id,
                    entry.user_text,
                    entry.assistant_text,
                    entry.created_at.isoformat(),
                ),
            )

    def recent(self, scope: Scope, limit: int, *, exclude_session: str | None = None) -> tuple[MemoryEntry, ...]:
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {', '.join(_ENTRY_COLUMNS)} FROM memory_entries "
                f"WHERE {SCOPE_MATCH} AND session_id IS NOT ? ORDER BY id DESC LIMIT ?",
                (*scope_values(scope), exclude_session, limit),
            ).fetchall()
        return tuple(
            MemoryEntry(scope, session_id, user_text, assistant_text, datetime.fromisoformat(created_at))
            for session_id, user_text, assistant_text, created_at in reversed(rows)
        )

    def close(self) -> None:
        self._conn.close()
