"""The embedded SessionStore: each session's chat history in a SQLite table.

Plain messages are stored as columns and read back without a JSON round trip; only
tool calls (rare in history) are JSON, through the shared converter.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

from agentloop.adapters.sqlite import closing_on_error, connect, transaction
from agentloop.messages import ChatMessage, Role, ToolCall
from agentloop.outcome import converter

_ROLES = {role.value: role for role in Role}
_SCHEMA = """
CREATE TABLE IF NOT EXISTS session_messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT,
    tool_call_id TEXT,
    name TEXT,
    tool_calls TEXT
);
CREATE INDEX IF NOT EXISTS session_messages_by_session ON session_messages (session_id, id);
"""


class SqliteSessionStore:
    """History rows ordered by insertion."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        conn.executescript(_SCHEMA)

    @classmethod
    def open(cls, path: str | Path) -> SqliteSessionStore:
        with closing_on_error(connect(path)) as conn:
            return cls(conn)

    def append(self, session_id: str, messages: Sequence[ChatMessage]) -> None:
        rows = [
            (
                session_id,
                m.role.value,
                m.content,
                m.tool_call_id,
                m.name,
                json.dumps(converter.unstructure(m.tool_calls)) if m.tool_calls else None,
            )
            for m in messages
        ]
        with self._lock, transaction(self._conn):
            self._conn.executemany(
                "INSERT INTO session_messages (session_id, role, content, tool_call_id, name, tool_calls) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )

    def recent(self, session_id: str, limit: int) -> tuple[ChatMessage, ...]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT role, content, tool_call_id, name, tool_calls FROM session_messages "
                "WHERE session_id = ? ORDER BY id DESC LIMIT ?",
                (session_id, limit),
            ).fetchall()
        return tuple(
            ChatMessage(
                _ROLES[role],
                content,
                converter.structure(json.loads(calls), tuple[ToolCall, ...]) if calls else (),
                tool_call_id,
                name,
            )
            for role, content, tool_call_id, name, calls in reversed(rows)
        )

    def close(self) -> None:
        self._conn.close()
