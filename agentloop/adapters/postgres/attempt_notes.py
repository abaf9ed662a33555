"""The PostgreSQL AttemptNotesStore: each task's attempt notes as one text row."""

from __future__ import annotations

from agentloop.adapters.postgres.database import Database, on_database
from agentloop.adapters.postgres.schema import Schema, Step
from agentloop.adapters.postgres.text import loaded, stored

SCHEMA = Schema(
    "attempt_notes",
    (Step("one growing text per task id", ("CREATE TABLE attempt_notes (task_id text PRIMARY KEY, text text NOT NULL)",)),),
)


class PostgresAttemptNotes:
    """Attempt notes by task id (task ids are unique across scopes, as in the task store)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @on_database(retry=True)
    async def read(self, task_id: str) -> str | None:
        async with self._db.pool.connection() as conn:
            row = await (await conn.execute("SELECT text FROM attempt_notes WHERE task_id = %s", (task_id,))).fetchone()
        return None if row is None else loaded(row[0])

    @on_database
    async def append(self, task_id: str, text: str) -> None:
        async with self._db.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO attempt_notes (task_id, text) VALUES (%s, %s) "
                "ON CONFLICT (task_id) DO UPDATE SET text = attempt_notes.text || excluded.text",
                (task_id, stored(text)),  # escaping is per character, so appending escaped texts escapes the whole
            )

    @on_database
    async def remove(self, task_id: str) -> bool:
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute("DELETE FROM attempt_notes WHERE task_id = %s", (task_id,))
            return cursor.rowcount > 0
