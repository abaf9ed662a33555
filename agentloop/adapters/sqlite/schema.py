"""Versioned schemas for the SQLite stores: each store declares numbered steps, and opening
a file applies the steps it lacks in one transaction.

Step 1 makes the tables as release 0.1 made them; each later step is one change (SQL, or
a function for data copies). The version each store reached is a row of
`schema_versions`, one per store, so stores sharing a file migrate independently. A file
without that row (release 0.1 wrote none) gets the version its `detect` reads from the
tables it finds. A file of a newer version is refused, never changed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

import attrs

from agentloop._log import get_logger
from agentloop.adapters.sqlite._connection import transaction
from agentloop.adapters.errors import NewerSchemaError

_log = get_logger("agentloop.stores")


@attrs.frozen
class Step:
    """One schema change: `sql` statements run in order, then `run` (for what SQL alone
    cannot say, such as copying rows into a rebuilt table)."""

    description: str
    sql: tuple[str, ...] = ()
    run: Callable[[sqlite3.Connection], None] | None = None


@attrs.frozen
class Schema:
    """A store's schema as numbered steps: `steps[0]` brings a file to version 1, and so on.

    `detect` says which version an unversioned file holds (0: none of the store's tables).
    """

    store: str
    steps: tuple[Step, ...]
    detect: Callable[[sqlite3.Connection], int]

    @property
    def version(self) -> int:
        return len(self.steps)


def columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """The column names of `table` (empty when there is no such table)."""
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def has_table(table: str) -> Callable[[sqlite3.Connection], int]:
    """The plain `detect`: version 1 (release 0.1) when `table` exists, else 0 (a new file)."""
    return lambda conn: 1 if columns(conn, table) else 0


def migrate(conn: sqlite3.Connection, schema: Schema) -> None:
    """Bring `schema.store`'s tables in the file of `conn` to `schema.version`.

    A file already there is only read. Otherwise the missing steps run in one
    BEGIN IMMEDIATE transaction, so a second process opening the file waits and then
    finds it migrated, and a failure leaves the file as it was.
    """
    if _recorded(conn, schema.store) == schema.version:
        return
    with transaction(conn):
        conn.execute("CREATE TABLE IF NOT EXISTS schema_versions (name TEXT PRIMARY KEY, version INTEGER NOT NULL)")
        recorded = _recorded(conn, schema.store)
        version = schema.detect(conn) if recorded is None else recorded
        if version > schema.version:
            raise NewerSchemaError(file_of(conn), schema.store, version, schema.version)
        for number, step in enumerate(schema.steps[version:], version + 1):
            for statement in step.sql:
                conn.execute(statement)
            if step.run is not None:
                step.run(conn)
            _log.info("stores.schema.step", store=schema.store, version=number, step=step.description, path=file_of(conn))
        conn.execute(
            "INSERT OR REPLACE INTO schema_versions (name, version) VALUES (?, ?)", (schema.store, schema.version)
        )


def rebuild(conn: sqlite3.Connection, table: str, create: Sequence[str], copy: Callable[[str], object]) -> None:
    """Replace `table` by the one `create` makes (its indexes after it): the old table is
    renamed, `copy(old_name)` moves its rows over, and it is dropped."""
    old = f"{table}_before_rebuild"
    conn.execute(f"ALTER TABLE {table} RENAME TO {old}")
    table_ddl, *indexes = create
    conn.execute(table_ddl)
    copy(old)
    conn.execute(f"DROP TABLE {old}")  # its indexes go with it, freeing their names
    for statement in indexes:
        conn.execute(statement)


def add_missing_columns(conn: sqlite3.Connection, table: str, added: dict[str, str]) -> None:
    """Add each column of `added` (name: definition) that `table` lacks, in order.

    Development builds between releases added such columns one at a time, so a step
    that adds several takes the table in any of those shapes.
    """
    present = columns(conn, table)
    for name, definition in added.items():
        if name not in present:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {definition}")


def _recorded(conn: sqlite3.Connection, store: str) -> int | None:
    if not columns(conn, "schema_versions"):
        return None
    row = conn.execute("SELECT version FROM schema_versions WHERE name = ?", (store,)).fetchone()
    return None if row is None else int(row[0])


def file_of(conn: sqlite3.Connection) -> str:
    """The file `conn` has open as its main database ('' for an in-memory one)."""
    return str(conn.execute("PRAGMA database_list").fetchone()[2])
