"""Erase and export of a `Subject`'s rows in SQLite tables: one DELETE per table in one transaction,
and an export read a page at a time on the store's thread, so a long history never sits in memory whole."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import attrs

from agentloop.adapters.sqlite._connection import transaction
from agentloop.adapters.sqlite._thread import StoreThread
from agentloop.adapters._rows import SCOPE_COLUMNS
from agentloop.adapters.sqlite.schema import Step
from agentloop.adapters._subjects import SQLITE, Columns, joined, subject_clauses
from agentloop.privacy import Subject, SubjectKind

SCOPE_NAMES = ("company_id", "org_id", "team_id", "project_id", "user_id", "session_id")
"""How an export record's `scope` names the parts of a row's chain."""
PAGE = 500
"""How many rows an export reads at once."""


@attrs.frozen
class Table:
    """A table holding a subject's rows: how its chain is spelled (`columns`), the column a row's
    session is in when apart from its scope, the unique column an export pages by, and the
    columns an export leaves out (vectors, derived from the text)."""

    kind: str
    name: str
    columns: Columns
    session_column: str | None = None
    note_column: str | None = None
    indexed: tuple[str, ...] = ()
    """Columns an index of the table's own already leads with, so `subject_indexes` adds none for them."""
    key: str | tuple[str, ...] = "rowid"
    """The unique column an export pages by, or the columns of a table's key (a table WITHOUT ROWID)."""
    hidden: tuple[str, ...] = ()
    user_sessions: str | None = None
    """A table of the same chain columns listing the sessions of each user here (a trigger keeps it): a
    user's rows are then found through their sessions, so this table needs no index by user."""

    def where(self, subject: Subject) -> tuple[str, list[Any]]:
        return joined(self.clauses(subject))

    def clauses(self, subject: Subject) -> list[tuple[str, list[Any]]]:
        clauses = subject_clauses(subject, self.columns, SQLITE, session_column=self.session_column, note_column=self.note_column)
        session = self.columns.session
        if self.user_sessions is None or session is None or subject.kind is not SubjectKind.USER or not clauses:
            return clauses
        (user, params), others = clauses[0], clauses[1:]  # the user's own rows come first (`subject_clauses`)
        through = f"{session} IN (SELECT {session} FROM {self.user_sessions} WHERE {user}) AND {user}"
        return [(through, [*params, *params]), *others]


def subject_indexes(*tables: Table) -> Step:
    """The step that indexes each table by user and by session, so erasing one reads only its rows."""
    statements = []
    for table in tables:
        for column in (table.columns.user, table.columns.session, table.session_column):
            if column is not None and column not in table.indexed:
                statements.append(f"CREATE INDEX IF NOT EXISTS {table.name}_by_{column} ON {table.name} ({column})")
    return Step("rows by user and by session, so erasing one reads only theirs", tuple(statements))


def erase_rows(conn: sqlite3.Connection, lock: threading.Lock, subject: Subject, tables: Sequence[Table]) -> int:
    """Delete `subject`'s rows from every table of `tables` in one transaction; how many."""
    with lock, transaction(conn):
        return delete_rows(conn, subject, tables)


def delete_rows(conn: sqlite3.Connection, subject: Subject, tables: Sequence[Table]) -> int:
    """The DELETEs of `erase_rows`, in the caller's transaction."""
    removed = 0
    for table in tables:
        for where, params in table.clauses(subject):
            removed += conn.execute(f"DELETE FROM {table.name} WHERE {where}", params).rowcount
    return removed


def erased_ids(conn: sqlite3.Connection, subject: Subject, table: Table, column: str) -> set[Any]:
    """The `column` values of `subject`'s rows in `table` (the ids an erase takes out of an index)."""
    found: set[Any] = set()
    for where, params in table.clauses(subject):
        found.update(value for (value,) in conn.execute(f"SELECT {column} FROM {table.name} WHERE {where}", params))
    return found


def export_page(
    conn: sqlite3.Connection, lock: threading.Lock, subject: Subject, table: Table, after: Any
) -> list[dict[str, Any]]:
    """The next `PAGE` rows of `subject` in `table` after key `after` (None: from the first), as records."""
    where, params = table.where(subject)
    columns = table.key if isinstance(table.key, tuple) else (table.key,)
    key, parts = ", ".join(columns), len(columns)
    start = "" if after is None else f" AND ({key}) > ({', '.join('?' * parts)})"
    with lock:
        cursor = conn.execute(
            f"SELECT {key}, * FROM {table.name} WHERE ({where}){start} ORDER BY {key} LIMIT {PAGE}",
            [*params, *([] if after is None else after)],
        )
        names = [column[0] for column in cursor.description][parts:]
        rows = cursor.fetchall()
    return [record(table, dict(zip(names, row[parts:], strict=True)), row[:parts]) for row in rows]


def record(table: Table, row: dict[str, Any], key: tuple[Any, ...]) -> dict[str, Any]:
    """A row as an export record: its kind, its scope columns as one `scope` object, then its other
    columns but the hidden ones and binary values; `page_key` is `key`, the row's key to page on from."""
    found: dict[str, Any] = {"kind": table.kind, "page_key": key}
    if SCOPE_COLUMNS[0] in row:
        found["scope"] = dict(zip(SCOPE_NAMES, (row.pop(column) for column in SCOPE_COLUMNS), strict=True))
    return found | {name: value for name, value in row.items() if name not in table.hidden and not isinstance(value, bytes)}


async def export_rows(
    thread: StoreThread, page: Callable[[Subject, Table, Any], list[dict[str, Any]]], subject: Subject,
    tables: Sequence[Table],
) -> AsyncIterator[dict[str, Any]]:
    """Every record of `subject` in `tables`, read a page at a time through `thread` (`page` is an
    engine's `export_page`); each record's `page_key` is dropped once it has served."""
    for table in tables:
        after: Any = None
        while True:
            rows = await thread.read(page, subject, table, after)
            for row in rows:
                after = row.pop("page_key")
                yield row
            if len(rows) < PAGE:
                break
