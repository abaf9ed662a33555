"""The PostgreSQL MemoryStore: remembered exchanges, each in its memory scope."""

from __future__ import annotations


from typing import Any

from agentloop.adapters.postgres._database import Database, keyed, on_database
from agentloop.adapters.postgres._subjects import SubjectRows, Table, subject_indexes
from agentloop.adapters._subjects import SCOPED
from agentloop.adapters.postgres.schema import Schema, Step
from agentloop.adapters.postgres._scopes import SCOPE_COLUMNS_DDL, SCOPE_COLUMNS_SQL, SCOPE_MARKS, scope_match
from agentloop.adapters.postgres._text import loaded, stored
from agentloop.adapters._rows import SCOPE_COLUMNS, scope_values
from agentloop.ports.stores import MemoryEntry
from agentloop.scopes import Scope

TABLES = (
    Table("entry", "memory_entries", SCOPED, "id", session_column="session_id"),
    Table("session", "memory_sessions", SCOPED, "last_id", session_column="session_id"),
)
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
        Step(
            "each scope's sessions by their newest entry, so recall skips a session without reading its rows",
            (
                f"""CREATE TABLE memory_sessions (
                    {SCOPE_COLUMNS_DDL},
                    session_id text NOT NULL,
                    last_id bigint NOT NULL
                )""",
                f"CREATE UNIQUE INDEX memory_sessions_by_session ON memory_sessions ({SCOPE_COLUMNS_SQL}, session_id) "
                "NULLS NOT DISTINCT",
                f"CREATE INDEX memory_sessions_by_last ON memory_sessions ({SCOPE_COLUMNS_SQL}, last_id)",
                f"INSERT INTO memory_sessions SELECT {SCOPE_COLUMNS_SQL}, session_id, max(id) FROM memory_entries "
                f"GROUP BY {SCOPE_COLUMNS_SQL}, session_id",
                # SET search_path FROM CURRENT: the function finds the bot's own memory_sessions whoever inserts.
                f"""CREATE FUNCTION memory_sessions_latest() RETURNS trigger LANGUAGE plpgsql
                SET search_path FROM CURRENT AS $$
                BEGIN
                    INSERT INTO memory_sessions VALUES ({", ".join(f"NEW.{column}" for column in SCOPE_COLUMNS)}, NEW.session_id, NEW.id)
                    ON CONFLICT ({SCOPE_COLUMNS_SQL}, session_id)
                    DO UPDATE SET last_id = greatest(memory_sessions.last_id, excluded.last_id);
                    RETURN NEW;
                END $$""",
                "CREATE TRIGGER memory_sessions_latest AFTER INSERT ON memory_entries "
                "FOR EACH ROW EXECUTE FUNCTION memory_sessions_latest()",
                "DROP INDEX memory_entries_by_scope",
                f"CREATE INDEX memory_entries_by_session ON memory_entries ({SCOPE_COLUMNS_SQL}, session_id, id)",
            ),
        ),
        Step(
            "keyed adds remember their key, so a re-run turn stores its memory entry once",
            (
                "ALTER TABLE memory_entries ADD COLUMN entry_key text",
                f"CREATE UNIQUE INDEX memory_entries_by_key ON memory_entries (entry_key, {SCOPE_COLUMNS_SQL}) "
                "NULLS NOT DISTINCT WHERE entry_key IS NOT NULL",
            ),
        ),
        Step("rows by user and by session, so erasing one reads only theirs", subject_indexes(*TABLES)),
    ),
)
_ENTRY_COLUMNS = "session_id, user_text, assistant_text, created_at"


class PostgresMemoryStore(SubjectRows):
    """Append-only memory; `recent` reads the newest entries of a scope.

    A trigger keeps each (scope, session)'s newest entry id in `memory_sessions`, so
    `recent` costs the same whether the excluded session has 10 entries or 10,000.
    """

    ERASED = TABLES
    EXPORTED = TABLES[:1]

    def __init__(self, db: Database) -> None:
        self._db = db

    @on_database(retry=keyed)
    async def add(self, entry: MemoryEntry, *, key: str | None = None) -> None:
        """Store `entry`; with a `key` already stored in its scope, nothing (the unique index
        says so, and the trigger keeping `memory_sessions` fires only for a stored row)."""
        async with self._db.pool.connection() as conn:
            await conn.execute(
                f"INSERT INTO memory_entries ({SCOPE_COLUMNS_SQL}, {_ENTRY_COLUMNS}, entry_key) "
                f"VALUES ({SCOPE_MARKS}, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (*scope_values(entry.scope), entry.session_id, stored(entry.user_text), stored(entry.assistant_text),
                 entry.created_at, key),
            )

    @on_database(retry=True)
    async def recent(self, scope: Scope, limit: int, *, exclude_session: str | None = None) -> tuple[MemoryEntry, ...]:
        """The newest `limit` entries of `scope` outside `exclude_session`, oldest first: they lie
        in the `limit` sessions with the newest entries (kept by a trigger in `memory_sessions`),
        so the excluded session's rows are never read, however many it has."""
        where, params = scope_match(scope)
        limit = max(limit, 0)
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(
                f"SELECT entry.id, {_ENTRY_COLUMNS} FROM ("
                f"SELECT session_id AS other FROM memory_sessions WHERE {where} AND session_id IS DISTINCT FROM %s "
                "ORDER BY last_id DESC LIMIT %s) AS sessions CROSS JOIN LATERAL ("
                f"SELECT id, {_ENTRY_COLUMNS} FROM memory_entries WHERE {where} AND session_id = sessions.other "
                "ORDER BY id DESC LIMIT %s) AS entry ORDER BY entry.id DESC LIMIT %s",
                (*params, exclude_session, limit, *params, limit, limit),
            )
            rows: list[tuple[Any, ...]] = await cursor.fetchall()
        return tuple(
            MemoryEntry(scope, session_id, loaded(user_text), loaded(assistant_text), created_at)
            for _, session_id, user_text, assistant_text, created_at in reversed(rows)
        )

