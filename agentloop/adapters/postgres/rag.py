"""The PostgreSQL RagStore: texts and their vectors in one table, searched through a
pgvector HNSW index with the scope filter inside the query."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import psycopg

from agentloop.adapters.postgres._embedders import RAG
from agentloop.adapters.postgres._database import Database, on_database
from agentloop.adapters.postgres._subjects import SubjectRows, Table, subject_indexes
from agentloop.adapters._subjects import SCOPED
from agentloop.adapters.postgres._keywords import WORDS, keyword_step, websearch_text
from agentloop.adapters.postgres._nearest import nearest
from agentloop.adapters.postgres.schema import Schema, Step
from agentloop.adapters.postgres._scopes import SCOPE_COLUMNS_DDL, SCOPE_COLUMNS_SQL, SCOPE_MARKS, scope_match
from agentloop.adapters.postgres._text import loaded, stored
from agentloop.adapters._rows import scope_values
from agentloop.ports.stores import RagHit
from agentloop.ports.vectors import Embedder, Vectors
from agentloop.retrieval import HybridWeights, fuse
from agentloop.scopes import Scope

TABLES = (Table("text", "rag_documents", SCOPED, "id", session_column="session_id"),)
SCHEMA = Schema(
    "rag",
    (
        Step(
            "texts in their scope, unique per scope, with an HNSW index of their vectors",
            (
                f"""CREATE TABLE rag_documents (
                    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    {SCOPE_COLUMNS_DDL},
                    session_id text,
                    text text NOT NULL,
                    digest text NOT NULL,
                    vector vector({{dim}}) NOT NULL,
                    created_at timestamptz NOT NULL DEFAULT now()
                )""",
                f"CREATE UNIQUE INDEX rag_documents_by_scope ON rag_documents ({SCOPE_COLUMNS_SQL}, digest) NULLS NOT DISTINCT",
                RAG.index_sql,
            ),
        ),
        RAG.record_step(),
        keyword_step("rag_documents", "text"),
        Step("rows by user and by session, so erasing one reads only theirs", subject_indexes(*TABLES)),
    ),
)


class PostgresRagStore(SubjectRows):
    """Scoped similarity search over stored texts; a text already stored in its scope is
    not stored twice (`add` returns its id), even when two writers add it at once.

    Embedding is awaited (`Embedder.aembed`), so a slow embedder holds up no other store call.
    A search fuses the nearest texts with those holding the query's words (full-text search
    in the same scope filter) as `hybrid` weighs them.
    """

    ERASED = TABLES
    EXPORTED = TABLES

    def __init__(self, db: Database, embedder: Embedder, *, hybrid: HybridWeights | None = None) -> None:
        self._db = db
        self._embedder = embedder
        self.hybrid = hybrid or HybridWeights()

    @on_database(retry=True)
    async def add(self, scope: Scope, text: str, *, session_id: str | None = None) -> int:
        digest = hashlib.sha256(text.encode()).hexdigest()
        vector = (await self._embedder.aembed([text]))[0]
        chain = scope_values(scope)
        async with self._db.pool.connection() as conn:
            row = await (
                await conn.execute(
                    f"INSERT INTO rag_documents ({SCOPE_COLUMNS_SQL}, session_id, text, digest, vector) "
                    f"VALUES ({SCOPE_MARKS}, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING id",
                    (*chain, session_id, stored(text), digest, vector),
                )
            ).fetchone()
            if row is None:
                where, params = scope_match(scope)
                row = await (
                    await conn.execute(f"SELECT id FROM rag_documents WHERE {where} AND digest = %s", (*params, digest))
                ).fetchone()
        if row is None:  # cannot happen: texts are never deleted
            raise LookupError(f"the text conflicting with {digest} in {scope} is gone")
        return int(row[0])

    @on_database(retry=True)
    async def search(self, scope: Scope, query: str, k: int) -> list[RagHit]:
        if k <= 0:
            return []
        vector = (await self._embedder.aembed([query]))[0]
        words = websearch_text(query) if self.hybrid.keyword > 0 else ""
        if not vector.any() and not words:
            return []
        per_side = self.hybrid.per_side(k)
        where, params = scope_match(scope)
        async with self._db.pool.connection() as conn:
            nearest_rows = await nearest(conn, "id, text", "rag_documents", "vector", where, params, vector, per_side) if vector.any() else []
            keyword_rows = await _keyword_rows(conn, where, params, vector, words, per_side) if words else []
        found = {int(id_): (loaded(text), float(score)) for id_, text, score, *_ in [*keyword_rows, *nearest_rows]}
        fused = fuse(
            [(int(id_), float(score)) for id_, _, score in nearest_rows],
            [(int(id_), float(rank)) for id_, _, _, rank in keyword_rows],
            self.hybrid,
        )
        return [RagHit(id_, *found[id_], scope) for id_, _ in fused[:k]]

    @on_database(retry=True)
    async def count(self) -> int:
        async with self._db.pool.connection() as conn:
            row = await (await conn.execute("SELECT count(*) FROM rag_documents")).fetchone()
        return 0 if row is None else int(row[0])

    @on_database(retry=True)
    async def texts(self, scope: Scope) -> list[str]:
        """Every text stored in `scope`, oldest first."""
        where, params = scope_match(scope)
        async with self._db.pool.connection() as conn:
            rows: list[tuple[Any, ...]] = await (
                await conn.execute(f"SELECT text FROM rag_documents WHERE {where} ORDER BY id", params)
            ).fetchall()
        return [loaded(text) for (text,) in rows]



async def _keyword_rows(
    conn: psycopg.AsyncConnection[Any], where: str, params: Sequence[object], vector: Vectors, words: str, limit: int
) -> list[tuple[Any, ...]]:
    """Up to `limit` (id, text, cosine similarity, full-text rank) of the texts matching
    `where` that hold `words` (`websearch_text`), best full-text rank first."""
    similarity, values = ("1 - (vector <=> %s)", (vector,)) if vector.any() else ("0.0", ())
    rows: list[tuple[Any, ...]] = await (
        await conn.execute(
            f"SELECT id, text, {similarity}, ts_rank_cd(words, q) AS rank FROM rag_documents, {WORDS} AS q "
            f"WHERE {where} AND words @@ q ORDER BY rank DESC, id LIMIT %s",
            (*values, words, *params, limit),
        )
    ).fetchall()
    return rows
