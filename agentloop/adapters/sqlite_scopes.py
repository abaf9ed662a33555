"""Tenant scopes as SQLite columns, and the versioned tables that carry them.

Every row of history, memory and the RAG index keeps its `Scope` as six columns, and a
read matches all six (`SCOPE_MATCH`): the one rule of `agentloop.scopes`, in SQL. Each
table's schema version is kept in `schema_versions`; a table written by release 0.1
(one opaque `scope` text, or for history only a session id) is rebuilt in place on open,
keeping every row and its id.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence

import structlog

from agentloop.adapters.sqlite import transaction
from agentloop.scopes import Scope

SCOPE_COLUMNS = ("scope_company", "scope_org", "scope_team", "scope_project", "scope_user", "scope_session")
SCOPE_COLUMNS_SQL = ", ".join(SCOPE_COLUMNS)
SCOPE_COLUMNS_DDL = ", ".join(f"{column} TEXT" for column in SCOPE_COLUMNS)
SCOPE_MATCH = " AND ".join(f"{column} IS ?" for column in SCOPE_COLUMNS)
"""A WHERE clause true exactly for rows of the scope given by `scope_values` (`IS` matches NULL)."""

SCHEMA_VERSION = 1
"""1: rows carry their scope as columns (release 0.1 tables had none: version 0)."""

_log = structlog.get_logger("agentloop.stores")


def scope_values(scope: Scope) -> tuple[str | None, ...]:
    """The column values of `scope`, in `SCOPE_COLUMNS` order."""
    return (scope.company_id, scope.org_id, scope.team_id, scope.project_id, scope.user_id, scope.session_id)


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


def ensure_schema(
    conn: sqlite3.Connection,
    table: str,
    create: Sequence[str],
    upgrade: Callable[[sqlite3.Connection, str], None],
) -> None:
    """Create `table` with the `create` statements (its indexes after it), or bring an
    older one to `SCHEMA_VERSION`: `upgrade(conn, old_table)` copies the old rows into the
    new table before the old one is dropped. A newer version is refused."""
    with transaction(conn):
        conn.execute("CREATE TABLE IF NOT EXISTS schema_versions (name TEXT PRIMARY KEY, version INTEGER NOT NULL)")
        row = conn.execute("SELECT version FROM schema_versions WHERE name = ?", (table,)).fetchone()
        version = 0 if row is None else int(row[0])
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            raise ValueError(
                f"table {table} has schema version {version}, newer than this agentloop understands "
                f"({SCHEMA_VERSION}); upgrade agentloop to open this database"
            )
        exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
        old = f"{table}_release_0_1"
        if exists:
            conn.execute(f"ALTER TABLE {table} RENAME TO {old}")
        table_ddl, *indexes = create
        conn.execute(table_ddl)
        if exists:
            upgrade(conn, old)
            (count,) = conn.execute(f"SELECT count(*) FROM {old}").fetchone()
            conn.execute(f"DROP TABLE {old}")
            _log.info("stores.migrated", table=table, rows=count, version=SCHEMA_VERSION)
        for statement in indexes:
            conn.execute(statement)
        conn.execute("INSERT OR REPLACE INTO schema_versions (name, version) VALUES (?, ?)", (table, SCHEMA_VERSION))


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
