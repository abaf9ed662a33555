"""Versioned schemas for the PostgreSQL stores: numbered steps per store, applied on open.

As on SQLite, each store declares its steps and the version it reached is a row of
`schema_versions` (in the bot's schema); a database of a newer version is refused, never
changed. Opening takes a transaction-scoped advisory lock first, so workers starting
together migrate one at a time and each later one finds the work done.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import psycopg
from psycopg import sql

from agentloop._log import get_logger
from agentloop.adapters.errors import NewerSchemaError

_log = get_logger("agentloop.stores")
_LOCK = "agentloop.migrate"
"""The advisory lock every migration of a database takes (its `hashtext`)."""


@attrs.frozen
class Step:
    """One schema change: statements run in order; `{dim}` in them is the embedder's dimension."""

    description: str
    sql: tuple[str, ...]


@attrs.frozen
class Schema:
    """A store's schema as numbered steps: `steps[0]` brings it to version 1, and so on."""

    store: str
    steps: tuple[Step, ...]

    @property
    def version(self) -> int:
        return len(self.steps)


async def migrate(
    conn: psycopg.AsyncConnection[Any], schema: str, stores: Sequence[Schema], *, dim: int, where: str
) -> None:
    """Create the pgvector extension and `schema` if missing, and bring each store of
    `stores` there to its version, all in one transaction (`where` names the database in errors)."""
    async with conn.transaction():
        await lock_migrations(conn)
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        versions = sql.Identifier(schema, "schema_versions")
        await conn.execute(
            sql.SQL("CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, version integer NOT NULL)").format(versions)
        )
        await conn.execute(search_path(schema, await vector_schema(conn), local=True))
        for store in stores:
            row = await (
                await conn.execute(sql.SQL("SELECT version FROM {} WHERE name = %s").format(versions), (store.store,))
            ).fetchone()
            found = 0 if row is None else int(row[0])
            if found > store.version:
                raise NewerSchemaError(where, store.store, found, store.version)
            for number, step in enumerate(store.steps[found:], found + 1):
                for statement in step.sql:
                    await conn.execute(statement.replace("{dim}", str(dim)))
                _log.info("stores.schema.step", store=store.store, version=number, step=step.description, where=where)
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {} (name, version) VALUES (%s, %s) ON CONFLICT (name) DO UPDATE SET version = excluded.version"
                ).format(versions),
                (store.store, store.version),
            )


async def lock_migrations(conn: psycopg.AsyncConnection[Any]) -> None:
    """Wait for, then hold until the transaction ends, the lock every change of a bot's schema takes."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (_LOCK,))


async def vector_schema(conn: psycopg.AsyncConnection[Any]) -> str:
    """The schema the pgvector extension was created in (its `vector` type lives there)."""
    row = await (
        await conn.execute("SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'vector'")
    ).fetchone()
    if row is None:
        raise LookupError("the pgvector extension is not installed in this database")
    return str(row[0]).strip('"')


def search_path(schema: str, vectors: str, *, local: bool = False) -> sql.Composed:
    """The SET that puts a bot's `schema` first and pgvector's schema after it."""
    scope = sql.SQL("SET LOCAL" if local else "SET")
    return sql.SQL("{} search_path TO {}, {}").format(scope, sql.Identifier(schema), sql.Identifier(vectors))


async def exists(conn: psycopg.AsyncConnection[Any], schema: str) -> bool:
    """Whether a bot's stores were ever created in `schema` (it has a `schema_versions` table)."""
    row = await (await conn.execute("SELECT to_regclass(%s)", (f'"{schema}".schema_versions',))).fetchone()
    return row is not None and row[0] is not None


async def dimension(conn: psycopg.AsyncConnection[Any], schema: str, table: str, column: str) -> int:
    """The declared dimension of the `vector` column `column` of `schema.table`."""
    row = await (
        await conn.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attname = %s",
            (f'"{schema}".{table}', column),
        )
    ).fetchone()
    if row is None:
        raise LookupError(f"{schema}.{table} has no column {column}")
    return int(row[0])
