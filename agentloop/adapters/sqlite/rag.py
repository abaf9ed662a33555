"""The embedded RagStore: texts and their vectors in SQLite (the truth), searched through
an hnswlib index that is derived from those rows and rebuilt whenever it disagrees."""

from __future__ import annotations

import functools
import hashlib
import json
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from agentloop.adapters.vectors.hnsw import HnswVectorIndex
from agentloop.adapters.vectors.scoped import ScopedVectorIndex, open_graph, unit_rows
from agentloop.adapters.sqlite._connection import closing_on_error, connect, data_version, on_commit, transaction
from agentloop.adapters.sqlite._embedders import check_embedder, record_step
from agentloop.adapters.sqlite._keywords import distinctive_query, keyword_step
from agentloop.adapters.sqlite.schema import Schema, Step, migrate
from agentloop.adapters._rows import scope_values
from agentloop.adapters.sqlite._scopes import (
    SCOPE_COLUMNS_DDL,
    SCOPE_COLUMNS_SQL,
    SCOPE_MATCH,
    scope_columns_step,
    scoped_version,
)
from agentloop.ports.stores import RagHit
from agentloop.ports.vectors import Embedder, Vectors
from agentloop.retrieval import HybridWeights, fuse
from agentloop.scopes import Scope
from agentloop.adapters.sqlite._thread import OnItsThread
from agentloop.adapters.sqlite._subjects import Table, erased_ids, export_page, export_rows, subject_indexes
from agentloop.adapters._subjects import SCOPED
from agentloop.privacy import Subject

_DOCUMENT_COLUMNS = ("session_id", "text", "digest", "vector", "created_at")
_KEYWORD_HITS = (
    "SELECT id, -bm25(rag_documents_words) FROM rag_documents_words JOIN rag_documents ON id = rag_documents_words.rowid "
    f"WHERE rag_documents_words MATCH ? AND {SCOPE_MATCH} ORDER BY bm25(rag_documents_words) LIMIT ?"
)
"""The ids of a scope's texts holding the query's words, best BM25 first."""
_SCOPED = (
    f"""CREATE TABLE rag_documents (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        {SCOPE_COLUMNS_DDL},
        session_id TEXT,
        text TEXT NOT NULL,
        digest TEXT NOT NULL,
        vector BLOB NOT NULL,
        created_at TEXT NOT NULL
    )""",
    f"CREATE INDEX rag_documents_by_scope_digest ON rag_documents ({SCOPE_COLUMNS_SQL}, digest)",
)
TABLES = (Table("text", "rag_documents", SCOPED, session_column="session_id", key="id", hidden=("digest",)),)
SCHEMA = Schema(
    "rag",
    (
        Step(
            "texts under one scope text (release 0.1)",
            (
                """CREATE TABLE IF NOT EXISTS rag_documents (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    scope TEXT NOT NULL,
                    session_id TEXT,
                    text TEXT NOT NULL,
                    digest TEXT NOT NULL,
                    vector BLOB NOT NULL,
                    created_at TEXT NOT NULL
                )""",
                "CREATE INDEX IF NOT EXISTS rag_documents_by_digest ON rag_documents (scope, digest)",
            ),
        ),
        scope_columns_step("rag_documents", _SCOPED, _DOCUMENT_COLUMNS),
        record_step("rag_documents", "vector"),
        keyword_step("rag_documents", ("text",)),
        subject_indexes(*TABLES),
    ),
    scoped_version("rag_documents"),
)
# A bot's own answers are few and retrieval needs only the top few: a lighter graph than
# the note index keeps indexing a turn's answer cheap (benchmarks/turn_latency.py).
INDEX_M = 16
INDEX_EF_CONSTRUCTION = 64
INDEX_EF = 64


class SqliteRagStore:
    """Scoped similarity search over stored texts.

    Each row keeps its vector, so the index can be rebuilt without the embedder;
    `close()` saves the index file. A search fuses the nearest texts with those holding the
    query's words (FTS5, BM25) as `hybrid` weighs them. A text already stored in its scope is not stored
    twice (`add` returns the existing id). After a crash the file is stale (its count differs
    from the table's) and `open` rebuilds it from the rows.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        embedder: Embedder,
        index: HnswVectorIndex,
        lock: threading.Lock | None = None,
        *,
        hybrid: HybridWeights | None = None,
    ) -> None:
        """On `conn`; stores sharing one connection share its `lock` too."""
        if index.dim != embedder.dim:
            raise ValueError(f"the index has dim {index.dim} but the embedder makes vectors of dim {embedder.dim}")
        self._conn = conn
        self._embedder = embedder
        # Each scope's vectors kept together, so a search costs what the scope holds (I11 filter).
        self._index: ScopedVectorIndex[str] = ScopedVectorIndex(index)
        self._lock = lock or threading.Lock()
        self._owns_connection = lock is None  # a shared lock means a shared connection, closed by its owner
        self.hybrid = hybrid or HybridWeights()
        self._common_words: set[str] = set()  # left out of keyword queries (`distinctive_query`)
        migrate(conn, SCHEMA)
        # What this process has read of the table: another connection's commit changes
        # `PRAGMA data_version`, and texts are only ever appended, so catching up reads ids above `_read_to`.
        self._data_version = data_version(conn)
        self._read_to = 0
        self._read_new_rows()

    def _catch_up(self) -> None:
        """Add the texts other processes stored since the last look (caller holds the lock);
        when nothing was committed elsewhere this is one PRAGMA."""
        version = data_version(self._conn)
        if version != self._data_version:
            self._data_version = version
            self._read_new_rows()

    def _read_new_rows(self) -> None:
        """Take in the texts above `_read_to` with their vectors; the graph indexes those it
        lacks (all of them when catching up; on open only those stored after the index file was read)."""
        rows = self._conn.execute(
            f"SELECT id, vector, {SCOPE_COLUMNS_SQL} FROM rag_documents WHERE id > ? ORDER BY id", (self._read_to,)
        ).fetchall()
        if not rows:
            return
        self._read_to = rows[-1][0]
        self._index.add(
            [Scope(*chain).key for _, _, *chain in rows],
            [id_ for id_, *_ in rows],
            np.frombuffer(b"".join(blob for _, blob, *_ in rows), dtype=np.float32).reshape(len(rows), -1),
        )

    @classmethod
    def open(
        cls, path: str | Path, embedder: Embedder, index_path: str | Path, *, hybrid: HybridWeights | None = None
    ) -> SqliteRagStore:
        """Open the table at `path` and its index at `index_path`, rebuilding the index if stale."""
        with closing_on_error(connect(path)) as conn:
            return cls.on(conn, embedder, index_path, hybrid=hybrid)

    @classmethod
    def on(
        cls,
        conn: sqlite3.Connection,
        embedder: Embedder,
        index_path: str | Path,
        lock: threading.Lock | None = None,
        *,
        hybrid: HybridWeights | None = None,
    ) -> SqliteRagStore:
        """`open` on a connection the caller opened (and closes if this fails); with a `lock`,
        the connection is shared and `close` leaves it open for its owner."""
        migrate(conn, SCHEMA)
        check_embedder(conn, "rag_documents", embedder.name, embedder.dim)
        (count,) = conn.execute("SELECT count(*) FROM rag_documents").fetchone()
        index = open_graph(
            Path(index_path),
            embedder.dim,
            count,
            lambda: _rows(conn),
            m=INDEX_M,
            ef_construction=INDEX_EF_CONSTRUCTION,
            ef=INDEX_EF,
        )
        return cls(conn, embedder, index, lock, hybrid=hybrid)

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    def add(self, scope: Scope, text: str, *, session_id: str | None = None, vector: Vectors | None = None) -> int:
        """Store `text` in `scope` (its `vector` as given, or embedded now); its id."""
        digest = hashlib.sha256(text.encode()).hexdigest()
        if vector is None:
            vector = self._embedder.embed([text])
        chain = scope_values(scope)
        with self._lock, transaction(self._conn):  # BEGIN IMMEDIATE: another process cannot slip the same text in between
            for (existing,) in self._conn.execute(
                f"SELECT id FROM rag_documents WHERE {SCOPE_MATCH} AND digest = ? AND text = ?", (*chain, digest, text)
            ):
                return int(existing)
            cursor = self._conn.execute(
                f"INSERT INTO rag_documents ({SCOPE_COLUMNS_SQL}, {', '.join(_DOCUMENT_COLUMNS)}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*chain, session_id, text, digest, vector[0].astype(np.float32).tobytes(), datetime.now(UTC).isoformat()),
            )
            new_id = cursor.lastrowid
            if new_id is None:
                raise sqlite3.DatabaseError("SQLite did not report the id of the inserted text")
            # Indexed once kept: a rolled-back id may be given to another text, which the index must then take.
            on_commit(self._conn, functools.partial(self._index.add, [scope.key], [new_id], vector))
        return new_id

    def search(self, scope: Scope, query: str, k: int, *, vector: Vectors | None = None) -> list[RagHit]:
        """The `k` texts of `scope` best for `query` (its `vector` as given, or embedded now):
        the nearest fused with those holding its words, each with its cosine similarity."""
        with self._lock:
            self._catch_up()
        key = scope.key
        if k <= 0 or self._index.size(key) == 0:
            return []
        if vector is None:
            vector = self._embedder.embed([query])
        per_side = self.hybrid.per_side(k)
        nearest = dict(self._index.search(vector, per_side, (key,))) if vector.any() else {}
        chain = scope_values(scope)
        with self._lock:
            words = distinctive_query(self._conn, "rag_documents_words", query, self._common_words) if self.hybrid.keyword > 0 else ""
            keyword = self._conn.execute(_KEYWORD_HITS, (words, *chain, per_side)).fetchall() if words else []
            # Without keyword hits the fusion keeps the vector side's order: no need to score it.
            fused = [id_ for id_, _ in fuse(list(nearest.items()), keyword, self.hybrid)[:k]] if keyword else list(nearest)[:k]
            if not fused:
                return []
            rows = self._conn.execute(
                f"SELECT id, text, vector, {SCOPE_COLUMNS_SQL} FROM rag_documents WHERE id IN ({','.join('?' * len(fused))})",
                fused,
            ).fetchall()
        # The rows themselves, not only the in-memory keys, must be in the scope (I11).
        found = {id_: (text, blob) for id_, text, blob, *row_chain in rows if tuple(row_chain) == chain}
        keyword_only = [id_ for id_ in found if id_ not in nearest]
        if keyword_only:  # their similarity, which the vector side did not give
            query_unit = unit_rows(vector)[0]
            nearest.update((id_, _cosine(found[id_][1], query_unit)) for id_ in keyword_only)
        return [RagHit(id_, found[id_][0], nearest[id_], scope) for id_ in fused if id_ in found]

    def texts(self, scope: Scope) -> list[str]:
        """Every text stored in `scope`, oldest first."""
        with self._lock:
            rows = self._conn.execute(
                f"SELECT text FROM rag_documents WHERE {SCOPE_MATCH} ORDER BY id", scope_values(scope)
            ).fetchall()
        return [text for (text,) in rows]

    def __len__(self) -> int:
        with self._lock:
            self._catch_up()
        return len(self._index)

    def save(self) -> None:
        """Write the index file so the next open need not rebuild it; it first takes in the
        texts other processes stored, and leaves a file that holds more in place."""
        with self._lock:
            self._catch_up()
        self._index.save(keep_larger=True)

    def erase(self, subject: Subject) -> int:
        """Delete `subject`'s rows, in one transaction; how many."""
        with self._lock, transaction(self._conn):
            ids = sorted(erased_ids(self._conn, subject, TABLES[0], "id"))
            self._conn.execute("DELETE FROM rag_documents WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(ids),))
            on_commit(self._conn, functools.partial(self._index.remove, ids))
        return len(ids)

    def export_page(self, subject: Subject, table: Table, after: object) -> list[dict[str, Any]]:
        return export_page(self._conn, self._lock, subject, table, after)

    def close(self) -> None:
        """Save the index, and close the connection unless it was lent (`on`)."""
        self.save()
        if self._owns_connection:
            self._conn.close()


def _cosine(blob: bytes, query_unit: Vectors) -> float:
    """The cosine similarity of a stored vector to a unit query vector."""
    return float(unit_rows(np.frombuffer(blob, dtype=np.float32))[0] @ query_unit)


def _rows(conn: sqlite3.Connection) -> Iterator[tuple[int, Vectors]]:
    for id_, blob in conn.execute("SELECT id, vector FROM rag_documents ORDER BY id"):
        yield id_, np.frombuffer(blob, dtype=np.float32)


class AsyncSqliteRagStore(OnItsThread[SqliteRagStore]):
    """The RagStore port on a `SqliteRagStore` (`engine`); texts are embedded first (awaited,
    so an embedder that waits on a server holds up neither the loop nor the file's thread).
    An add never waits for the graph: the index's own worker inserts the text there."""

    async def add(self, scope: Scope, text: str, *, session_id: str | None = None) -> int:
        vector = await self.engine.embedder.aembed([text])
        return await self._thread.write(self.engine.add, scope, text, session_id=session_id, vector=vector)

    async def search(self, scope: Scope, query: str, k: int) -> list[RagHit]:
        if k <= 0:
            return []
        vector = await self.engine.embedder.aembed([query])
        return await self._thread.read(self.engine.search, scope, query, k, vector=vector)

    async def count(self) -> int:
        return await self._thread.read(self.engine.__len__)

    async def texts(self, scope: Scope) -> list[str]:
        return await self._thread.read(self.engine.texts, scope)

    async def erase(self, subject: Subject) -> int:
        return await self._thread.write(self.engine.erase, subject)

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        return export_rows(self._thread, self.engine.export_page, subject, TABLES)
