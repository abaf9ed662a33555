"""Tenant scopes as SQLite columns.

Every row of history, memory and the RAG index keeps its `Scope` as six columns, and a
read matches all six (`SCOPE_MATCH`): the one rule of `agentloop.scopes`, in SQL. A table
written by release 0.1 (one opaque `scope` text, or for history only a session id) is
rebuilt by its store's second schema step (`agentloop.adapters.sqlite.schema`), keeping
every row and its id.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

from agentloop._log import get_logger
from agentloop.adapters._rows import SCOPE_COLUMNS, scope_values
from agentloop.adapters.sqlite.schema import Step, columns, rebuild
from agentloop.scopes import Scope

SCOPE_COLUMNS_SQL = ", ".join(SCOPE_COLUMNS)
SCOPE_COLUMNS_DDL = ", ".join(f"{column} TEXT" for column in SCOPE_COLUMNS)
SCOPE_MATCH = " AND ".join(f"{column} IS ?" for column in SCOPE_COLUMNS)
"""A WHERE clause true exactly for rows of the scope given by `scope_values` (`IS` matches NULL)."""

_log = get_logger("agentloop.stores")


def release_0_1_scope(text: str) -> Scope:
    """The scope of a row that release 0.1 stored under `text` (`user:U`, `project:P`,
    `session:S`). Such a row cannot say its org or team, so it goes to the chain that has
    none: only a session without org and team reads it again."""
    kind, colon, value = text.partition(":")
    if colon and kind == "user":
        return Scope(user_id=value)
    if colon and kind == "project":
        return Scope(project_id=value)
    if colon and kind == "session":
        return Scope(session_id=value)
    try:
        return Scope.from_key(text)
    except ValueError:
        _log.warning("stores.migration.unknown_scope", scope=text, kept_under=Scope().key)
        return Scope()


def scoped_version(table: str) -> Callable[[sqlite3.Connection], int]:
    """The `detect` of a store whose step 2 gives `table` its scope columns: 0 without the
    table, 1 for release 0.1's (a `scope` text), 2 for one a development build already scoped."""

    def detect(conn: sqlite3.Connection) -> int:
        present = columns(conn, table)
        return 0 if not present else 2 if SCOPE_COLUMNS[0] in present else 1

    return detect


def copy_with_scopes(conn: sqlite3.Connection, old: str, table: str, columns: Sequence[str]) -> None:
    """Copy a release 0.1 table whose rows name their scope in a `scope` text column,
    keeping every row's id and `columns`, with the scope as columns."""
    names = ", ".join(columns)
    marks = ", ".join("?" * (len(columns) + 1 + len(SCOPE_COLUMNS)))
    rows = conn.execute(f"SELECT id, scope, {names} FROM {old} ORDER BY id").fetchall()
    conn.executemany(
        f"INSERT INTO {table} (id, {SCOPE_COLUMNS_SQL}, {names}) VALUES ({marks})",
        [(id_, *scope_values(release_0_1_scope(scope)), *rest) for id_, scope, *rest in rows],
    )


def scope_columns_step(table: str, create: Sequence[str], columns: Sequence[str]) -> Step:
    """The step that rebuilds a release 0.1 `table` (one `scope` text) as `create` makes it,
    each row keeping its id and `columns` with its scope as columns."""
    return Step(
        "each row keeps its tenant chain as columns",
        run=lambda conn: rebuild(conn, table, create, lambda old: copy_with_scopes(conn, old, table, columns)),
    )
