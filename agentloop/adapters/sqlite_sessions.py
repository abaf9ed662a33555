"""The embedded SessionStore: each session's chat history in a SQLite table."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

from agentloop.adapters.sqlite import connect
from agentloop.messages import ChatMessage
from agentloop.outcome import converter

_SCHEMA = """
CREATE TABLE IF NOT EXISTS session_messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS session_messages_by_session ON session_messages (session_id, id);
"""


class SqliteSessionStore:
    """History rows as JSON (the shared converter), ordered by insertion."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        conn.executescript(_SCHEMA)

    @classmethod
    def open(cls, path: str | Path) -> SqliteSessionStore:
        return cls(connect(path))

    def append(self, session_id: str, messages: Sequence[ChatMessage]) -> None:
        rows = [(session_id, json.dumps(converter.unstructure(m))) for m in messages]
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                self._conn.executemany("INSERT INTO session_messages (session_id, message) VALUES (?, ?)", rows)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def recent(self, session_id: str, limit: int) -> tuple[ChatMessage, ...]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT message FROM session_messages WHERE session_id = ? ORDER BY id DESC LIMIT ?",
                (session_id, limit),
            ).fetchall()
        return tuple(converter.structure(json.loads(row[0]), ChatMessage) for row in reversed(rows))

    def close(self) -> None:
        self._conn.close()
