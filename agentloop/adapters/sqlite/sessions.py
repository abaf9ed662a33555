"""The embedded SessionStore: each session's chat history in a SQLite table.

Each row keeps the history scope (the session within its tenant chain) as columns.
Plain messages are stored as columns and read back without a JSON round trip; only
tool calls (rare in history) are JSON, through the shared converter.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from agentloop.adapters.sqlite._connection import closing_on_error, connect, data_version, on_commit, transaction
from agentloop.adapters.sqlite.schema import Schema, Step, migrate, rebuild
from agentloop.adapters._rows import scope_values
from agentloop.adapters.sqlite._scopes import SCOPE_COLUMNS_DDL, SCOPE_COLUMNS_SQL, SCOPE_MATCH, scoped_version
from agentloop.messages import ChatMessage, Role, ToolCall
from agentloop.outcome import converter
from agentloop.scopes import Scope, sees_unchained_history
from agentloop.adapters.sqlite._thread import OnItsThread
from agentloop.adapters.sqlite._subjects import Table, subject_indexes, delete_rows, export_page, export_rows
from agentloop.adapters._subjects import SCOPED
from agentloop.privacy import Subject

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


TABLES = (Table("message", "session_messages", SCOPED, indexed=("scope_session",)), Table("append_key", "session_append_keys", SCOPED))
"""What an erase or export of history covers; `Table` says how each names its chain."""
ACTIVITY = Table("activity", "history_activity", SCOPED)
"""When each history was last written (the retention schema's, where it is applied): erased with the history."""

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
        subject_indexes(*TABLES),
    ),
    scoped_version("session_messages"),
)


_HISTORY_OF = f"scope_session IS ? AND (({SCOPE_MATCH}) OR (scope_company IS NULL AND ?))"
"""The rows of one history scope, with release 0.1's unchained rows where the scope sees them."""

TAILS_KEPT = 1024
"""How many histories' newest messages a store keeps in memory, the most recently read."""


class SqliteSessionStore:
    """History rows ordered by insertion, each in the scope it was written in.

    The newest messages last read of each of `TAILS_KEPT` histories are kept in memory and
    grown by this store's appends once they commit, so a turn reads its history window
    without a query (a read's cost is mostly making the messages).
    Another connection's commit to the file (`PRAGMA data_version`) drops them all.
    """

    def __init__(self, conn: sqlite3.Connection, lock: threading.Lock | None = None) -> None:
        """On `conn`; stores sharing one connection share its `lock` too."""
        self._conn = conn
        self._lock = lock or threading.Lock()
        migrate(conn, SCHEMA)
        self._tails: OrderedDict[Scope, _Tail] = OrderedDict()
        self._counts: OrderedDict[Scope, int] = OrderedDict()
        self._version = data_version(conn)

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
            on_commit(self._conn, functools.partial(self._grow_tail, scope, tuple(messages)))
        return True

    def recent(self, scope: Scope, limit: int) -> tuple[ChatMessage, ...]:
        with self._lock:
            self._forget_if_written_elsewhere()
            tail = self._tails.get(scope)
            if tail is not None and limit > 0 and (limit <= tail.limit or len(tail.messages) < tail.limit):
                self._tails.move_to_end(scope)
                return tail.messages[-limit:]
            rows = self._conn.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM session_messages WHERE {_HISTORY_OF} ORDER BY id DESC LIMIT ?",
                (scope.session_id, *scope_values(scope), sees_unchained_history(scope), limit),
            ).fetchall()
            messages = tuple(
                ChatMessage(
                    _ROLES[role],
                    content,
                    converter.structure(json.loads(calls), tuple[ToolCall, ...]) if calls else (),
                    tool_call_id,
                    name,
                )
                for role, content, tool_call_id, name, calls in reversed(rows)
            )
            if limit > 0:
                on_commit(self._conn, functools.partial(self._keep_tail, scope, _Tail(limit, messages)))
        return messages

    def count(self, scope: Scope) -> int:
        """The history's length, kept in memory once read (as the tails are) and grown by this store's appends."""
        with self._lock:
            self._forget_if_written_elsewhere()
            known = self._counts.get(scope)
            if known is not None:
                self._counts.move_to_end(scope)
                return known
            (counted,) = self._conn.execute(
                f"SELECT count(*) FROM session_messages WHERE {_HISTORY_OF}",
                (scope.session_id, *scope_values(scope), sees_unchained_history(scope)),
            ).fetchone()
            on_commit(self._conn, functools.partial(self._keep_count, scope, counted))
        return int(counted)

    def _forget_if_written_elsewhere(self) -> None:
        """Drop the kept tails and counts when another connection wrote to the file."""
        version = data_version(self._conn)
        if version != self._version:
            self._version = version
            self._tails.clear()
            self._counts.clear()

    def _keep_count(self, scope: Scope, counted: int) -> None:
        self._counts[scope] = counted
        self._counts.move_to_end(scope)
        if len(self._counts) > TAILS_KEPT:
            self._counts.popitem(last=False)

    def _keep_tail(self, scope: Scope, tail: _Tail) -> None:
        self._tails[scope] = tail
        self._tails.move_to_end(scope)
        if len(self._tails) > TAILS_KEPT:
            self._tails.popitem(last=False)

    def _grow_tail(self, scope: Scope, added: tuple[ChatMessage, ...]) -> None:
        """Add committed messages to the scope's kept tail, as a read would now return them;
        a message a read would not return as it is (a tool call, a subclass) drops the tail."""
        if scope in self._counts:
            self._counts[scope] += len(added)
        tail = self._tails.get(scope)
        if tail is None:
            return
        if all(type(m) is ChatMessage and not m.tool_calls for m in added):
            self._tails[scope] = _Tail(tail.limit, (tail.messages + added)[-tail.limit :])
        else:
            del self._tails[scope]


    def erase(self, subject: Subject) -> int:
        """Delete `subject`'s rows (messages and append keys), in one transaction; how many."""
        with self._lock, transaction(self._conn):
            removed = delete_rows(self._conn, subject, TABLES)
            if self._conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (ACTIVITY.name,)).fetchone():
                delete_rows(self._conn, subject, (ACTIVITY,))
            on_commit(self._conn, self._forget)
        return removed

    def _forget(self) -> None:
        """Drop every kept tail and count: an erase may have emptied any of them."""
        self._tails.clear()
        self._counts.clear()

    def export_page(self, subject: Subject, table: Table, after: object) -> list[dict[str, Any]]:
        return export_page(self._conn, self._lock, subject, table, after)

    def close(self) -> None:
        self._conn.close()


@attrs.frozen
class _Tail:
    """A history's newest messages, up to `limit`: fewer only when that is all of them."""

    limit: int
    messages: tuple[ChatMessage, ...]


class AsyncSqliteSessionStore(OnItsThread[SqliteSessionStore]):
    """The SessionStore port on a `SqliteSessionStore` (`engine`)."""

    async def append(self, scope: Scope, messages: Sequence[ChatMessage], *, key: str | None = None) -> bool:
        return await self._thread.write(self.engine.append, scope, messages, key=key)

    async def recent(self, scope: Scope, limit: int) -> tuple[ChatMessage, ...]:
        return await self._thread.read(self.engine.recent, scope, limit)

    async def count(self, scope: Scope) -> int:
        return await self._thread.read(self.engine.count, scope)

    async def erase(self, subject: Subject) -> int:
        return await self._thread.write(self.engine.erase, subject)

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        return export_rows(self._thread, self.engine.export_page, subject, TABLES[:1])
