"""The PostgreSQL MemoryStore: remembered exchanges, each in its memory scope."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentloop.adapters.postgres.database import Database, on_database
from agentloop.adapters.postgres.schema import Schema, Step
from agentloop.adapters.postgres.scopes import SCOPE_COLUMNS_DDL, SCOPE_COLUMNS_SQL, SCOPE_MARKS, scope_match
from agentloop.adapters.postgres.text import loaded, stored
from agentloop.adapters.rows import scope_values
from agentloop.ports.stores import MemoryEntry
from agentloop.scopes import Scope

SCHEMA = Schema(
    "memory",
    (
        Step(
            "memory entries in their scope",
            (
                f"""CREATE TABLE memory_entries (
                    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    {SCOPE_COLUMNS_DDL},
                    session_id text NOT NULL,
                    user_text text NOT NULL,
                    assistant_text text NOT NULL,
                    created_at timestamptz NOT NULL
                )""",
                f"CREATE INDEX memory_entries_by_scope ON memory_entries ({SCOPE_COLUMNS_SQL}, id)",
            ),
        ),
    ),
)
_ENTRY_COLUMNS = "session_id, user_text, assistant_text, created_at"


class PostgresMemoryStore:
    """Append-only memory; `recent` reads the newest entries of a scope."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @on_database
    async def add(self, entry: MemoryEntry) -> None:
        async with self._db.pool.connection() as conn:
            await conn.execute(
                f"INSERT INTO memory_entries ({SCOPE_COLUMNS_SQL}, {_ENTRY_COLUMNS}) VALUES ({SCOPE_MARKS}, %s, %s, %s, %s)",
                (*scope_values(entry.scope), entry.session_id, stored(entry.user_text), stored(entry.assistant_text),
                 entry.created_at),
            )

    @on_database
    async def recent(self, scope: Scope, limit: int, *, exclude_session: str | None = None) -> tuple[MemoryEntry, ...]:
        where, params = scope_match(scope)
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM memory_entries WHERE {where} "
                "AND session_id IS DISTINCT FROM %s ORDER BY id DESC LIMIT %s",
                (*params, exclude_session, max(limit, 0)),
            )
            rows: list[tuple[Any, ...]] = await cursor.fetchall()
        return tuple(
            MemoryEntry(scope, session_id, loaded(user_text), loaded(assistant_text), created_at)
            for session_id, user_text, assistant_text, created_at in reversed(rows)
        )
