"""Which embedder made a bot's vectors in PostgreSQL: one row per vector table, written when
the stores are first opened and checked by every later open, and how to re-embed a table."""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np
import psycopg

from agentloop.adapters.embedders.hashing import NAME_PREFIX
from agentloop.adapters.postgres.schema import Step, dimension
from agentloop.adapters.postgres._text import loaded
from agentloop.adapters.errors import EmbedderMismatchError
from agentloop.ports.vectors import Embedder


@attrs.frozen
class VectorTable:
    """A table of texts and their vectors: the columns, and the HNSW index over the vectors."""

    table: str
    text_column: str
    vector_column: str
    index: str
    escaped: bool
    """Whether the text column holds `postgres._text.stored` forms."""

    @property
    def index_sql(self) -> str:
        return f"CREATE INDEX {self.index} ON {self.table} USING hnsw ({self.vector_column} vector_cosine_ops)"

    def record_step(self) -> Step:
        """The schema step that gives the table its embedder record: vectors stored before
        there was one were made by the default HashingEmbedder of their dimension (the only
        embedder then); a table still empty gets the embedder of the first open."""
        column = self.vector_column
        return Step(
            f"{self.table} records which embedder made its vectors",
            (
                "CREATE TABLE IF NOT EXISTS vector_embedders (vectors text PRIMARY KEY, name text NOT NULL, dim integer NOT NULL)",
                f"INSERT INTO vector_embedders SELECT '{self.table}', '{NAME_PREFIX}' || vector_dims({column}), "
                f"vector_dims({column}) FROM {self.table} LIMIT 1 ON CONFLICT DO NOTHING",
            ),
        )


RAG = VectorTable("rag_documents", "text", "vector", "rag_documents_by_vector", escaped=True)
KNOWLEDGE = VectorTable("knowledge_items", "markdown", "embedding", "knowledge_items_by_embedding", escaped=False)
VECTOR_TABLES = (RAG, KNOWLEDGE)


async def recorded_embedder(conn: psycopg.AsyncConnection[Any], table: VectorTable) -> tuple[str, int] | None:
    """The (name, dim) recorded for `table` (the bot's schema first on the search path)."""
    row = await (await conn.execute("SELECT name, dim FROM vector_embedders WHERE vectors = %s", (table.table,))).fetchone()
    return None if row is None else (str(row[0]), int(row[1]))


async def schema_embedders(conn: psycopg.AsyncConnection[Any], schema: str) -> list[tuple[str, int]]:
    """The (name, dim) pairs recorded in the bot's `schema`, read before it is migrated (none
    when it has no record table)."""
    row = await (await conn.execute("SELECT to_regclass(%s)", (f'"{schema}".vector_embedders',))).fetchone()
    if row is None or row[0] is None:
        return []
    rows = await (await conn.execute(f'SELECT name, dim FROM "{schema}".vector_embedders ORDER BY vectors')).fetchall()
    return [(str(name), int(dim)) for name, dim in rows]


async def check_embedder(
    conn: psycopg.AsyncConnection[Any], schema: str, table: VectorTable, embedder: Embedder, where: str
) -> None:
    """Record `embedder` for `table` if it has none yet (giving the still empty vector
    column its dimension); refuse another with `EmbedderMismatchError` naming both.
    Called in a transaction with the bot's schema first on the search path."""
    recorded = await recorded_embedder(conn, table)
    if recorded is None:
        if await dimension(conn, schema, table.table, table.vector_column) != embedder.dim:
            await _set_dimension(conn, table, embedder.dim, ())
        await _record(conn, table, embedder)
        recorded = (embedder.name, embedder.dim)
    if recorded != (embedder.name, embedder.dim):
        raise EmbedderMismatchError(f"{where} ({table.table})", recorded[0], embedder.name)


async def reembed_table(conn: psycopg.AsyncConnection[Any], table: VectorTable, embedder: Embedder, batch_size: int) -> int:
    """Replace every vector of `table` by `embedder`'s vector of its text and record
    `embedder`, in one transaction (the caller's); how many rows."""
    rows = await (await conn.execute(f"SELECT id, {table.text_column} FROM {table.table} ORDER BY id")).fetchall()
    texts = [loaded(text) if table.escaped else text for _, text in rows]
    batches = [await embedder.aembed(texts[start : start + batch_size]) for start in range(0, len(texts), batch_size)]
    vectors = np.concatenate(batches) if batches else np.zeros((0, embedder.dim), dtype=np.float32)
    await _set_dimension(conn, table, embedder.dim, [(vector, id_) for (id_, _), vector in zip(rows, vectors, strict=True)])
    await _record(conn, table, embedder)
    return len(rows)


async def _set_dimension(
    conn: psycopg.AsyncConnection[Any], table: VectorTable, dim: int, updates: Any
) -> None:
    """Give the vector column the dimension `dim`, writing `updates` ((vector, id) pairs) on
    the way: the column is untyped while they are written, and its HNSW index rebuilt after."""
    column = table.vector_column
    await conn.execute(f"DROP INDEX IF EXISTS {table.index}")
    await conn.execute(f"ALTER TABLE {table.table} ALTER COLUMN {column} TYPE vector")
    async with conn.cursor() as cursor:
        await cursor.executemany(f"UPDATE {table.table} SET {column} = %s WHERE id = %s", updates)
    await conn.execute(f"ALTER TABLE {table.table} ALTER COLUMN {column} TYPE vector({dim})")
    await conn.execute(table.index_sql)


async def _record(conn: psycopg.AsyncConnection[Any], table: VectorTable, embedder: Embedder) -> None:
    await conn.execute(
        "INSERT INTO vector_embedders (vectors, name, dim) VALUES (%s, %s, %s) "
        "ON CONFLICT (vectors) DO UPDATE SET name = excluded.name, dim = excluded.dim",
        (table.table, embedder.name, embedder.dim),
    )
