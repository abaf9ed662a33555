"""Erase and export of a `Subject`'s rows in PostgreSQL tables: one DELETE per clause in the caller's
transaction, and an export read a page at a time, so a long history never sits in memory whole.
Deleting a row takes its vector (pgvector) and its words (tsvector) with it: both are its columns."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import psycopg
from psycopg.rows import dict_row

from agentloop.adapters.postgres._database import on_database
from agentloop.adapters._rows import SCOPE_COLUMNS
from agentloop.adapters._subjects import POSTGRES, Columns, subject_clauses, subject_where
from agentloop.privacy import Subject

if TYPE_CHECKING:
    from agentloop.adapters.postgres._database import Database

PAGE = 500
"""How many rows an export reads at once."""
SCOPE_NAMES = ("company_id", "org_id", "team_id", "project_id", "user_id", "session_id")
_HIDDEN = ("words", "embedding", "vector", "digest")
"""Columns an export leaves out: derived from the text (vectors, words) or a hash of it."""


@attrs.frozen
class Table:
    """A table holding a subject's rows: how its chain is spelled, the columns a row's session or note
    is in when apart from its scope, and the unique column an export pages by."""

    kind: str
    name: str
    columns: Columns
    key: str
    session_column: str | None = None
    note_column: str | None = None
    indexed: tuple[str, ...] = ()
    """Columns an index of the table's own already leads with, so `subject_indexes` adds none for them."""

    def clauses(self, subject: Subject) -> list[tuple[str, list[Any]]]:
        return subject_clauses(subject, self.columns, POSTGRES, session_column=self.session_column, note_column=self.note_column)


async def delete_rows(conn: psycopg.AsyncConnection[Any], subject: Subject, tables: Sequence[Table]) -> int:
    """Delete `subject`'s rows from every table of `tables` (in the caller's transaction); how many."""
    removed = 0
    for table in tables:
        for where, params in table.clauses(subject):
            cursor = await conn.execute(f"DELETE FROM {table.name} WHERE {where}", params)
            removed += max(cursor.rowcount, 0)
    return removed


async def page_rows(conn: psycopg.AsyncConnection[Any], subject: Subject, table: Table, after: Any) -> list[dict[str, Any]]:
    """The next `PAGE` rows of `subject` in `table` after key `after` (None: from the first), as records."""
    where, params = subject_where(
        subject, table.columns, POSTGRES, session_column=table.session_column, note_column=table.note_column
    )
    start = "" if after is None else f" AND {table.key} > %s"
    async with conn.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(
            f"SELECT {table.key} AS page_key, * FROM {table.name} WHERE ({where}){start} ORDER BY {table.key} LIMIT {PAGE}",
            [*params, *([] if after is None else [after])],
        )
        rows = await cursor.fetchall()
    return [record(table, dict(row)) for row in rows]


def record(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    """A row as an export record: its kind, its scope columns as one `scope` object, its other columns
    but the derived ones, times as ISO text."""
    found: dict[str, Any] = {"kind": table.kind}
    if SCOPE_COLUMNS[0] in row:
        found["scope"] = dict(zip(SCOPE_NAMES, (row.pop(column) for column in SCOPE_COLUMNS), strict=True))
    for name, value in row.items():
        if name not in _HIDDEN and not isinstance(value, bytes):
            found[name] = value.isoformat() if hasattr(value, "isoformat") else value
    return found


async def export_rows(
    page: Callable[[Subject, Table, Any], Coroutine[Any, Any, list[dict[str, Any]]]], subject: Subject,
    tables: Sequence[Table],
) -> AsyncIterator[dict[str, Any]]:
    """Every record of `subject` in `tables`, a page at a time (`page` is a store's page read)."""
    for table in tables:
        after: Any = None
        while True:
            rows = await page(subject, table, after)
            for row in rows:
                after = row.pop("page_key")
                yield row
            if len(rows) < PAGE:
                break


def subject_indexes(*tables: Table) -> tuple[str, ...]:
    """The statements that index each table by user and by session, so erasing one reads only its rows."""
    statements = []
    for table in tables:
        for column in (table.columns.user, table.columns.session, table.session_column):
            if column is not None and column not in table.indexed:
                statements.append(f"CREATE INDEX IF NOT EXISTS {table.name}_by_{column} ON {table.name} ({column})")
    return tuple(statements)


class SubjectRows:
    """`erase` and `export` for a store whose subject's rows are in `ERASED` (deleted in one transaction) and
    `EXPORTED` (read a page at a time); a store with more to remove overrides `_erase_in`."""

    ERASED: ClassVar[tuple[Table, ...]]
    EXPORTED: ClassVar[tuple[Table, ...]]
    _db: Database

    @on_database
    async def erase(self, subject: Subject) -> int:
        """Delete `subject`'s rows, in one transaction; how many."""
        async with self._db.pool.connection() as conn, conn.transaction():
            return await self._erase_in(conn, subject)

    async def _erase_in(self, conn: psycopg.AsyncConnection[Any], subject: Subject) -> int:
        return await delete_rows(conn, subject, self.ERASED)

    @on_database(retry=True)
    async def _export_page(self, subject: Subject, table: Table, after: object) -> list[dict[str, Any]]:
        async with self._db.pool.connection() as conn:
            return await page_rows(conn, subject, table, after)

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        return export_rows(self._export_page, subject, self.EXPORTED)
