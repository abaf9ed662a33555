"""The embedded MemoryStore: remembered exchanges per scope in a SQLite table."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

from agentloop.adapters.sqlite._connection import closing_on_error, connect
from agentloop.adapters.sqlite.schema import Schema, Step, migrate
from agentloop.adapters._rows import SCOPE_COLUMNS, scope_values
from agentloop.adapters.sqlite._scopes import (
    SCOPE_COLUMNS_DDL,
    SCOPE_COLUMNS_SQL,
    SCOPE_MATCH,
    scope_columns_step,
    scoped_version,
)
from agentloop.ports.stores import MemoryEntry
from agentloop.scopes import Scope
from agentloop.adapters.sqlite._thread import OnItsThread
from agentloop.adapters.sqlite._subjects import Table, subject_indexes, erase_rows, export_page, export_rows
from agentloop.adapters._subjects import SCOPED
from agentloop.privacy import Subject

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
_SAME_SCOPE = " AND ".join(f"{column} IS NEW.{column}" for column in SCOPE_COLUMNS)
_LATEST = (
    f"""CREATE TABLE memory_sessions (
        {SCOPE_COLUMNS_DDL},
        session_id TEXT NOT NULL,
        last_id INTEGER NOT NULL
    )""",
    f"CREATE INDEX memory_sessions_by_session ON memory_sessions ({SCOPE_COLUMNS_SQL}, session_id)",
    f"CREATE INDEX memory_sessions_by_last ON memory_sessions ({SCOPE_COLUMNS_SQL}, last_id)",
    f"INSERT INTO memory_sessions SELECT {SCOPE_COLUMNS_SQL}, session_id, max(id) FROM memory_entries "
    f"GROUP BY {SCOPE_COLUMNS_SQL}, session_id",
    f"""CREATE TRIGGER memory_sessions_latest AFTER INSERT ON memory_entries BEGIN
        UPDATE memory_sessions SET last_id = NEW.id WHERE {_SAME_SCOPE} AND session_id = NEW.session_id;
        INSERT INTO memory_sessions SELECT {", ".join(f"NEW.{column}" for column in SCOPE_COLUMNS)}, NEW.session_id, NEW.id
        WHERE NOT EXISTS (SELECT 1 FROM memory_sessions WHERE {_SAME_SCOPE} AND session_id = NEW.session_id);
    END""",
    "DROP INDEX memory_entries_by_scope",
    f"CREATE INDEX memory_entries_by_session ON memory_entries ({SCOPE_COLUMNS_SQL}, session_id, id)",
)
_KEYED = (
    "ALTER TABLE memory_entries ADD COLUMN entry_key TEXT",
    # json_array keeps NULL apart from '' and makes the scope one value: a UNIQUE index sees NULLs as distinct.
    f"CREATE UNIQUE INDEX memory_entries_by_key ON memory_entries (entry_key, json_array({SCOPE_COLUMNS_SQL})) "
    "WHERE entry_key IS NOT NULL",
)
TABLES = (
    Table("entry", "memory_entries", SCOPED, session_column="session_id", key="id"),
    Table("session", "memory_sessions", SCOPED, session_column="session_id"),
)
"""What an erase or export of memory covers: the entries, and each session's newest entry."""

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
        Step("each scope's sessions by their newest entry, so recall skips a session without reading its rows", _LATEST),
        Step("keyed adds remember their key, so a re-run turn stores its memory entry once", _KEYED),
        subject_indexes(*TABLES),
    ),
    scoped_version("memory_entries"),
)




class SqliteMemoryStore:
    """Append-only memory; `recent` reads the newest entries of a scope.

    A trigger keeps each (scope, session)'s newest entry id in `memory_sessions`, so
    `recent` costs the same whether the excluded session has 10 entries or 10,000.
    """

    def __init__(self, conn: sqlite3.Connection, lock: threading.Lock | None = None) -> None:
        """On `conn`; stores sharing one connection share its `lock` too."""
        self._conn = conn
        self._lock = lock or threading.Lock()
        migrate(conn, SCHEMA)

    @classmethod
    def open(cls, path: str | Path) -> SqliteMemoryStore:
        with closing_on_error(connect(path)) as conn:
            return cls(conn)

    def add(self, entry: MemoryEntry, *, key: str | None = None) -> None:
        """Store `entry`; with a `key` already stored in its scope, nothing (the unique index says so)."""
        with self._lock:
            self._conn.execute(
                f"INSERT INTO memory_entries ({SCOPE_COLUMNS_SQL}, {', '.join(_ENTRY_COLUMNS)}, entry_key) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (
                    *scope_values(entry.scope),
                    entry.session_id,
                    entry.user_text,
                    entry.assistant_text,
                    entry.created_at.isoformat(),
                    key,
                ),
            )

    def recent(self, scope: Scope, limit: int, *, exclude_session: str | None = None) -> tuple[MemoryEntry, ...]:
        """The newest `limit` entries of `scope` outside `exclude_session`, oldest first. They
        lie in the `limit` sessions with the newest entries, read newest session first until
        the next one's newest entry is older than `limit` rows already read."""
        if limit <= 0:
            return ()
        chain = scope_values(scope)
        newest = (
            f"SELECT id, {', '.join(_ENTRY_COLUMNS)} FROM memory_entries "
            f"WHERE {SCOPE_MATCH} AND session_id = ? ORDER BY id DESC LIMIT ?"
        )
        rows: list[tuple[int, str, str, str, str]] = []
        with self._lock:
            sessions = self._conn.execute(
                f"SELECT session_id, last_id FROM memory_sessions WHERE {SCOPE_MATCH} AND session_id IS NOT ? "
                "ORDER BY last_id DESC LIMIT ?",
                (*chain, exclude_session, limit),
            ).fetchall()
            for session_id, last_id in sessions:
                if len(rows) >= limit and rows[limit - 1][0] > last_id:
                    break
                rows.extend(self._conn.execute(newest, (*chain, session_id, limit)))
                rows.sort(reverse=True)
        del rows[limit:]
        return tuple(
            MemoryEntry(scope, session_id, user_text, assistant_text, datetime.fromisoformat(created_at))
            for _, session_id, user_text, assistant_text, created_at in reversed(rows)
        )


    def erase(self, subject: Subject) -> int:
        """Delete `subject`'s rows (entries and sessions), in one transaction; how many."""
        return erase_rows(self._conn, self._lock, subject, TABLES)

    def export_page(self, subject: Subject, table: Table, after: object) -> list[dict[str, Any]]:
        return export_page(self._conn, self._lock, subject, table, after)

    def close(self) -> None:
        self._conn.close()


class AsyncSqliteMemoryStore(OnItsThread[SqliteMemoryStore]):
    """The MemoryStore port on a `SqliteMemoryStore` (`engine`)."""

    async def add(self, entry: MemoryEntry, *, key: str | None = None) -> None:
        await self._thread.write(self.engine.add, entry, key=key)

    async def recent(self, scope: Scope, limit: int, *, exclude_session: str | None = None) -> tuple[MemoryEntry, ...]:
        return await self._thread.read(self.engine.recent, scope, limit, exclude_session=exclude_session)

    async def erase(self, subject: Subject) -> int:
        return await self._thread.write(self.engine.erase, subject)

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        return export_rows(self._thread, self.engine.export_page, subject, TABLES[:1])
