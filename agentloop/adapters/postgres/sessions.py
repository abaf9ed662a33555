"""The PostgreSQL SessionStore: each session's history, in the session's tenant chain."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg

from agentloop.adapters.postgres._database import Database, keyed, on_database
from agentloop.adapters.postgres._subjects import SubjectRows, Table, delete_rows, subject_indexes
from agentloop.adapters._subjects import SCOPED
from agentloop.privacy import Subject
from agentloop.adapters.postgres.schema import Schema, Step
from agentloop.adapters.postgres._scopes import SCOPE_COLUMNS_DDL, SCOPE_COLUMNS_SQL, SCOPE_MARKS, scope_match
from agentloop.adapters.postgres._text import loaded, stored
from agentloop.adapters._rows import scope_values
from agentloop.messages import ChatMessage, Role, ToolCall
from agentloop.outcome import converter
from agentloop.scopes import Scope

TABLES = (Table("message", "session_messages", SCOPED, "id", indexed=("scope_session",)), Table("append_key", "session_appends", SCOPED, "ctid", indexed=("scope_session",)))
ACTIVITY = Table("activity", "history_activity", SCOPED, "ctid")
"""When each history was last written (the retention schema's, where it is applied): erased with the history."""
SCHEMA = Schema(
    "sessions",
    (
        Step(
            "history per session in its tenant chain, and the keys of idempotent appends",
            (
                f"""CREATE TABLE session_messages (
                    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    {SCOPE_COLUMNS_DDL},
                    role text NOT NULL,
                    content text,
                    tool_call_id text,
                    name text,
                    tool_calls text
                )""",
                "CREATE INDEX session_messages_by_scope ON session_messages "
                "(scope_session, scope_user, scope_project, scope_team, scope_org, scope_company, id)",
                f"CREATE TABLE session_appends ({SCOPE_COLUMNS_DDL}, key text NOT NULL)",
                f"CREATE UNIQUE INDEX session_appends_by_key ON session_appends (scope_session, key, {SCOPE_COLUMNS_SQL}) "
                "NULLS NOT DISTINCT",
            ),
        ),
        Step("rows by user and by session, so erasing one reads only theirs", subject_indexes(*TABLES)),
    ),
)
_MESSAGE_COLUMNS = "role, content, tool_call_id, name, tool_calls"
_ROLES = {role.value: role for role in Role}


class PostgresSessionStore(SubjectRows):
    """History rows in insertion order, each in the scope it was written in."""

    ERASED = TABLES
    EXPORTED = TABLES[:1]

    def __init__(self, db: Database) -> None:
        self._db = db

    @on_database(retry=keyed)
    async def append(self, scope: Scope, messages: Sequence[ChatMessage], *, key: str | None = None) -> bool:
        """Add `messages` at the end of `scope`'s history, atomically; with a `key` already
        applied in `scope`, add nothing and return False."""
        chain = scope_values(scope)
        rows = [
            (*chain, m.role.value, None if m.content is None else stored(m.content), m.tool_call_id, m.name,
             json.dumps(converter.unstructure(m.tool_calls)) if m.tool_calls else None)
            for m in messages
        ]
        async with self._db.pool.connection() as conn, conn.transaction():
            # Appends to one history take turns, so each batch's ids are consecutive within it.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"history {scope.key}",))
            if key is not None:
                cursor = await conn.execute(
                    f"INSERT INTO session_appends ({SCOPE_COLUMNS_SQL}, key) VALUES ({SCOPE_MARKS}, %s) "
                    "ON CONFLICT DO NOTHING RETURNING 1",
                    (*chain, key),
                )
                if await cursor.fetchone() is None:
                    return False
            async with conn.cursor() as cursor:
                await cursor.executemany(
                    f"INSERT INTO session_messages ({SCOPE_COLUMNS_SQL}, {_MESSAGE_COLUMNS}) "
                    f"VALUES ({SCOPE_MARKS}, %s, %s, %s, %s, %s)",
                    rows,
                )
        return True

    @on_database(retry=True)
    async def count(self, scope: Scope) -> int:
        where, params = scope_match(scope)
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(f"SELECT count(*) FROM session_messages WHERE {where}", params)
            row = await cursor.fetchone()
        return int(row[0]) if row else 0

    @on_database(retry=True)
    async def recent(self, scope: Scope, limit: int) -> tuple[ChatMessage, ...]:
        where, params = scope_match(scope)
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM session_messages WHERE {where} ORDER BY id DESC LIMIT %s",
                (*params, max(limit, 0)),
            )
            rows: list[tuple[Any, ...]] = await cursor.fetchall()
        return tuple(
            ChatMessage(
                _ROLES[role],
                None if content is None else loaded(content),
                converter.structure(json.loads(calls), tuple[ToolCall, ...]) if calls else (),
                tool_call_id,
                name,
            )
            for role, content, tool_call_id, name, calls in reversed(rows)
        )

    async def _erase_in(self, conn: psycopg.AsyncConnection[Any], subject: Subject) -> int:
        removed = await delete_rows(conn, subject, TABLES)
        if (await (await conn.execute("SELECT to_regclass('history_activity')")).fetchone() or (None,))[0] is not None:
            await delete_rows(conn, subject, (ACTIVITY,))
        return removed
