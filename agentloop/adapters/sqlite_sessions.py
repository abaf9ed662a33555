"""The embedded SessionStore: each session's chat history in a SQLite table.

Each row keeps the history scope (the session within its tenant chain) as columns.
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
from agentloop.adapters.sqlite_schema import Schema, Step, migrate, rebuild
from agentloop.adapters.rows import scope_values
from agentloop.adapters.sqlite_scopes import SCOPE_COLUMNS_DDL, SCOPE_COLUMNS_SQL, SCOPE_MATCH, scoped_version
from agentloop.messages import ChatMessage, Role, ToolCall
from agentloop.outcome import converter
from agentloop.scopes import Scope, sees_unchained_history

_ROLES = {role.value: role for role in Role}
_MESSAGE_COLUMNS = "role, content, tool_call_id, name, tool_calls"
_SCOPED = (
    f"""CREATE TABLE session_messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        {SCOPE_COLUMNS_DDL},
        role TEXT NOT NULL,
        content TEXT,
        tool_call_id TEXT,
        name TEXT,
        tool_calls TEXT
    )""",
    "CREATE INDEX session_messages_by_session ON session_messages (scope_session, id)",
)


def _scope_columns(conn: sqlite3.Connection) -> None:
    """Release 0.1 rows name only their session: kept with no company, the mark of
    history that `sees_unchained_history` decides who sees."""
    rebuild(
        conn,
        "session_messages",
        _SCOPED,
        lambda old: conn.execute(
            f"INSERT INTO session_messages (id, scope_session, {_MESSAGE_COLUMNS}) "
            f"SELECT id, session_id, {_MESSAGE_COLUMNS} FROM {old} ORDER BY id"
        ),
    )


SCHEMA = Schema(
    "sessions",
    (
        Step(
            "history per session id (release 0.1)",
            (
                """CREATE TABLE IF NOT EXISTS session_messages (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    session_id TEXT NOT NULL,
                    role TEXT NOT NULL,
                    content TEXT,
                    tool_call_id TEXT,
                    name TEXT,
                    tool_calls TEXT
                )""",
                "CREATE INDEX IF NOT EXISTS session_messages_by_session ON session_messages (session_id, id)",
            ),
        ),
        Step("each row keeps its session's tenant chain as columns", run=_scope_columns),
        Step(
            "keyed appends remember their key, so a re-run turn writes its history once",
            (
                f"CREATE TABLE session_append_keys ({SCOPE_COLUMNS_DDL}, append_key TEXT NOT NULL)",
                "CREATE INDEX session_append_keys_by_key ON session_append_keys (append_key, scope_session)",
            ),
        ),
    ),
    scoped_version("session_messages"),
)


class SqliteSessionStore:
    """History rows ordered by insertion, each in the scope it was written in."""

    def __init__(self, conn: sqlite3.Connection, lock: threading.Lock | None = None) -> None:
        """On `conn`; stores sharing one connection share its `lock` too."""
        self._conn = conn
        self._lock = lock or threading.Lock()
        migrate(conn, SCHEMA)

    @classmethod
    def open(cls, path: str | Path) -> SqliteSessionStore:
        with closing_on_error(connect(path)) as conn:
            return cls(conn)

    def append(self, scope: Scope, messages: Sequence[ChatMessage], *, key: str | None = None) -> bool:
        chain = scope_values(scope)
        rows = [
            (
                *chain,
                m.role.value,
                m.content,
                m.tool_call_id,
                m.name,
                json.dumps(converter.unstructure(m.tool_calls)) if m.tool_calls else None,
            )
            for m in messages
        ]
        with self._lock, transaction(self._conn):
            if key is not None:
                if self._conn.execute(
                    f"SELECT 1 FROM session_append_keys WHERE append_key = ? AND {SCOPE_MATCH}", (key, *chain)
                ).fetchone():
                    return False
                self._conn.execute(
                    f"INSERT INTO session_append_keys ({SCOPE_COLUMNS_SQL}, append_key) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (*chain, key),
                )
            self._conn.executemany(
                f"INSERT INTO session_messages ({SCOPE_COLUMNS_SQL}, {_MESSAGE_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
        return True

    def recent(self, scope: Scope, limit: int) -> tuple[ChatMessage, ...]:
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM session_messages WHERE scope_session IS ? "
                f"AND (({SCOPE_MATCH}) OR (scope_company IS NULL AND ?)) ORDER BY id DESC LIMIT ?",
                (scope.session_id, *scope_values(scope), sees_unchained_history(scope), limit),
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
