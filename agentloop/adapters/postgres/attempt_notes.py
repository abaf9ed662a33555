"""The PostgreSQL AttemptNotesStore: each task's attempt notes as one text row."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from agentloop.adapters.postgres._database import Database, on_database
from agentloop.privacy import Subject
from agentloop.adapters.postgres.schema import Schema, Step
from agentloop.adapters.postgres._text import loaded, stored

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

    @on_database
    async def erase(self, subject: Subject) -> int:
        """Forget the texts of the subject's tasks (`Subject.tasks`), in one statement; how many."""
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute("DELETE FROM attempt_notes WHERE task_id = ANY(%s)", (sorted(subject.tasks),))
        return max(cursor.rowcount, 0)

    @on_database(retry=True)
    async def _texts(self, subject: Subject) -> list[tuple[str, str]]:
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT task_id, text FROM attempt_notes WHERE task_id = ANY(%s) ORDER BY task_id", (sorted(subject.tasks),)
            )
            return [(task_id, loaded(text)) for task_id, text in await cursor.fetchall()]

    async def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        for task_id, text in await self._texts(subject):
            yield {"kind": "attempt_notes", "task_id": task_id, "text": text}
