"""The embedded MemoryStore: remembered exchanges per scope in a SQLite table."""

from __future__ import annotations

import sqlite3
import threading
from datetime import datetime
from pathlib import Path

from agentloop.adapters.sqlite import closing_on_error, connect
from agentloop.ports.stores import MemoryEntry

_SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    scope TEXT NOT NULL,
    session_id TEXT NOT NULL,
    user_text TEXT NOT NULL,
    assistant_text TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_entries_by_scope_session ON memory_entries (scope, id, session_id);
"""


class SqliteMemoryStore:
    """Append-only memory; `recent` reads the newest entries of a scope."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        conn.executescript(_SCHEMA)

    @classmethod
    def open(cls, path: str | Path) -> SqliteMemoryStore:
        with closing_on_error(connect(path)) as conn:
            return cls(conn)

    def add(self, entry: MemoryEntry) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT INTO memory_entries (scope, session_id, user_text, assistant_text, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (entry.scope, entry.session_id, entry.user_text, entry.assistant_text, entry.created_at.isoformat()),
            )

    def recent(self, scope: str, limit: int, *, exclude_session: str | None = None) -> tuple[MemoryEntry, ...]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT scope, session_id, user_text, assistant_text, created_at FROM memory_entries "
                "WHERE scope = ? AND session_id IS NOT ? ORDER BY id DESC LIMIT ?",
                (scope, exclude_session, limit),
            ).fetchall()
        return tuple(
            MemoryEntry(scope, session_id, user_text, assistant_text, datetime.fromisoformat(created_at))
            for scope, session_id, user_text, assistant_text, created_at in reversed(rows)
        )

    def close(self) -> None:
        self._conn.close()
