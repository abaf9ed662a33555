"""The PostgreSQL SummaryStore: each session's compacted history, versioned, in its tenant chain."""

from __future__ import annotations


from typing import Any

from agentloop.adapters.postgres._database import Database, on_database
from agentloop.adapters.postgres._subjects import SubjectRows, Table, subject_indexes
from agentloop.adapters._subjects import SCOPED
from agentloop.adapters.postgres.schema import Schema, Step
from agentloop.adapters.postgres._scopes import SCOPE_COLUMNS_DDL, SCOPE_COLUMNS_SQL, SCOPE_MARKS, scope_match
from agentloop.adapters.postgres._text import loaded, stored
from agentloop.adapters._rows import scope_values
from agentloop.ports.summaries import SessionSummary
from agentloop.scopes import Scope

TABLES = (Table("summary", "session_summaries", SCOPED, "ctid", indexed=("scope_session",)),)
SCHEMA = Schema(
    "summaries",
    (
        Step(
            "each session's summaries, one row a version",
            (
                f"""CREATE TABLE session_summaries (
                    {SCOPE_COLUMNS_DDL},
                    version integer NOT NULL,
                    covered integer NOT NULL,
                    text text NOT NULL,
                    created_at timestamptz NOT NULL
                )""",
                f"CREATE UNIQUE INDEX session_summaries_by_version ON session_summaries "
                f"(scope_session, {SCOPE_COLUMNS_SQL}, version) NULLS NOT DISTINCT",
            ),
        ),
        Step("rows by user and by session, so erasing one reads only theirs", subject_indexes(*TABLES)),
    ),
)
_COLUMNS = "version, covered, text, created_at"


class PostgresSummaryStore(SubjectRows):
    """Summaries by history scope; a version is inserted only after the one before it, and the
    unique index lets one of two processes adding the same version win."""

    ERASED = TABLES
    EXPORTED = TABLES

    def __init__(self, db: Database) -> None:
        self._db = db

    @on_database
    async def add(self, summary: SessionSummary) -> bool:
        where, params = scope_match(summary.scope)
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(
                f"INSERT INTO session_summaries ({SCOPE_COLUMNS_SQL}, {_COLUMNS}) "
                f"SELECT {SCOPE_MARKS}, %s, %s, %s, %s "
                f"WHERE (SELECT coalesce(max(version), 0) FROM session_summaries WHERE {where}) = %s "
                "ON CONFLICT DO NOTHING RETURNING 1",
                (*scope_values(summary.scope), summary.version, summary.covered, stored(summary.text), summary.created_at,
                 *params, summary.version - 1),
            )
            return await cursor.fetchone() is not None

    @on_database(retry=True)
    async def latest(self, scope: Scope) -> SessionSummary | None:
        found = await self._read(scope, "ORDER BY version DESC LIMIT 1")
        return found[0] if found else None

    @on_database(retry=True)
    async def versions(self, scope: Scope) -> tuple[SessionSummary, ...]:
        return await self._read(scope, "ORDER BY version")

    async def _read(self, scope: Scope, order: str) -> tuple[SessionSummary, ...]:
        where, params = scope_match(scope)
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(f"SELECT {_COLUMNS} FROM session_summaries WHERE {where} {order}", params)
            rows: list[tuple[Any, ...]] = await cursor.fetchall()
        return tuple(SessionSummary(scope, version, covered, loaded(text), at) for version, covered, text, at in rows)

