"""The PostgreSQL KnowledgeRepository: notes with their usage counters, retrievals,
feedback and merge suggestions, searched through pgvector within the caller's chain."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import psycopg
from psycopg.rows import dict_row

from agentloop.adapters.postgres._embedders import KNOWLEDGE
from agentloop.adapters.postgres._database import Database, on_database
from agentloop.adapters.postgres._subjects import SubjectRows, Table
from agentloop.adapters._subjects import NOTES, NO_CHAIN, SCOPED
from agentloop.adapters.postgres._keywords import WORDS, keyword_step, websearch_text
from agentloop.adapters.postgres._nearest import nearest
from agentloop.adapters.postgres.schema import Schema, Step
from agentloop.adapters.postgres._scopes import SCOPE_COLUMNS_SQL, SCOPE_MARKS, columns_match, row_scope, scope_match
from agentloop.adapters._rows import KNOWLEDGE_COLUMNS, json_text, knowledge_item
from agentloop.adapters._rows import SCOPE_COLUMNS, scope_values
from agentloop.notes.errors import UnknownNoteError
from agentloop.outcome import converter
from agentloop.notes.models import KnowledgeItem, Layer, LayerIds, MergeSuggestion, NoteStatus, Retrieval
from agentloop.ports.vectors import Vectors
from agentloop.scopes import Scope

_SESSION_DDL = ", ".join(f"{column} text" for column in SCOPE_COLUMNS)  # NULL throughout: no session
TABLES = (
    Table("retrieval", "note_retrievals", SCOPED, "seq", note_column="note_id"),
    Table("feedback", "note_feedback", SCOPED, "ctid", note_column="note_id"),
    Table("merge_suggestion", "merge_suggestions", NO_CHAIN, "ctid", note_column="first_id"),
    Table("merge_suggestion", "merge_suggestions", NO_CHAIN, "ctid", note_column="second_id"),
    Table("note", "knowledge_items", NOTES, "id", note_column="id"),
)
"""What an erase or export of notes covers: the subject's sessions' retrievals (their queries) and
feedback, and the notes distilled from those sessions with every row about them (docs/adr/0028)."""
SCHEMA = Schema(
    "knowledge",
    (
        Step(
            "notes in their owning chain, their retrievals and feedback by session chain, merge suggestions",
            (
                """CREATE TABLE knowledge_items (
                    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    type text NOT NULL,
                    layer text NOT NULL,
                    company_id text NOT NULL,
                    org_id text,
                    team_id text,
                    project_id text,
                    status text NOT NULL,
                    title text NOT NULL,
                    markdown text NOT NULL,
                    embedding vector({dim}) NOT NULL,
                    metadata text,
                    retrieval_count integer NOT NULL DEFAULT 0,
                    usefulness_score integer NOT NULL DEFAULT 0,
                    reference_count integer NOT NULL DEFAULT 0,
                    flagged_for_review boolean NOT NULL DEFAULT false,
                    created_at timestamptz NOT NULL,
                    updated_at timestamptz
                )""",
                "CREATE INDEX knowledge_items_by_owner ON knowledge_items (company_id, org_id, team_id, project_id, status)",
                KNOWLEDGE.index_sql,
                f"""CREATE TABLE note_retrievals (
                    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    note_id bigint NOT NULL REFERENCES knowledge_items (id),
                    query text NOT NULL,
                    {_SESSION_DDL},
                    at timestamptz NOT NULL
                )""",
                "CREATE INDEX note_retrievals_by_note ON note_retrievals (note_id, seq)",
                f"CREATE INDEX note_retrievals_by_session ON note_retrievals (scope_session, {SCOPE_COLUMNS_SQL})",
                f"""CREATE TABLE note_feedback (
                    note_id bigint NOT NULL REFERENCES knowledge_items (id),
                    {_SESSION_DDL},
                    at timestamptz NOT NULL
                )""",
                f"CREATE UNIQUE INDEX note_feedback_once ON note_feedback (note_id, {SCOPE_COLUMNS_SQL}) NULLS NOT DISTINCT",
                """CREATE TABLE merge_suggestions (
                    first_id bigint NOT NULL,
                    second_id bigint NOT NULL,
                    similarity double precision NOT NULL,
                    created_at timestamptz NOT NULL,
                    PRIMARY KEY (first_id, second_id)
                )""",
            ),
        ),
        KNOWLEDGE.record_step(),
        Step(
            "retrievals name the turn that was shown the notes, so feedback on a turn credits them",
            ("ALTER TABLE note_retrievals ADD COLUMN turn_id text",),
        ),
        keyword_step("knowledge_items", "title || ' ' || markdown"),
    ),
)
_COLUMNS = ", ".join(("id", *KNOWLEDGE_COLUMNS))
_COPIED_TYPES = ["int8", *["text"] * 9, "vector", "text", "int4", "int4", "int4", "bool", "timestamptz", "timestamptz"]
"""The types of `_COLUMNS` in order, as `add_many`'s binary COPY must name them."""
_REBUILD_MIN = 1000
"""The smallest batch for which `add_many` considers building the HNSW index again."""
_BUILD_MEMORY_MAX_MB = 1024
"""The most `maintenance_work_mem` a rebuild asks for (the graph of 100,000 x 384 takes about 250 MB)."""
_BIGINT = range(-(2**63), 2**63)
"""The ids a bigint holds; any other id names no note."""


def _copied(item: KnowledgeItem, vector: Vectors) -> tuple[Any, ...]:
    """The values of `KNOWLEDGE_COLUMNS` for `item` (its embedding as `vector`), as the COPY sends them."""
    ids = item.layer_ids
    metadata = None if item.metadata is None else json_text(converter.unstructure(item.metadata))
    return (
        item.type.value, item.layer.value, ids.company_id, ids.org_id, ids.team_id, ids.project_id, item.status.value,
        item.title, item.markdown, vector, metadata, item.retrieval_count, item.usefulness_score, item.reference_count,
        item.flagged_for_review, item.created_at, item.updated_at,
    )


async def _count(conn: psycopg.AsyncConnection[Any]) -> int:
    row = await (await conn.execute("SELECT count(*) FROM knowledge_items")).fetchone()
    return 0 if row is None else int(row[0])


def _item(row: dict[str, Any]) -> KnowledgeItem:
    return knowledge_item(row | {"embedding": row["embedding"].to_numpy().tobytes()})


def _owner_match(owners: Collection[LayerIds]) -> tuple[str, list[str]]:
    """A condition true for notes owned by one of `owners`, and its parameters."""
    conditions, params = [], []
    for ids in sorted(owners, key=lambda ids: ids.narrowest().depth):  # one SQL text per chain shape
        where, values = columns_match(("company_id", "org_id", "team_id", "project_id"), _owner(ids))
        conditions.append(f"({where})")
        params += values
    return " OR ".join(conditions), params


def _owner(ids: LayerIds) -> tuple[str | None, ...]:
    return (ids.company_id, ids.org_id, ids.team_id, ids.project_id)


class PostgresKnowledgeRepository(SubjectRows):
    """Notes in PostgreSQL; every counter change is one UPDATE under a row lock, every
    status change a compare-and-set, so workers on many machines can share them."""

    ERASED = TABLES
    EXPORTED = (TABLES[0], TABLES[1], TABLES[-1])

    def __init__(self, db: Database, dim: int) -> None:
        self._db = db
        self.dim = dim

    @on_database(retry=True)
    async def count(self) -> int:
        async with self._db.pool.connection() as conn:
            row = await (await conn.execute("SELECT count(*) FROM knowledge_items")).fetchone()
        return 0 if row is None else int(row[0])

    async def add(self, item: KnowledgeItem) -> KnowledgeItem:
        (note_id,) = await self.add_many([item])
        return await self.get(note_id)

    @on_database
    async def add_many(self, items: Sequence[KnowledgeItem]) -> list[int]:
        """Store new items in one transaction: their ids are drawn from the table's identity
        first, then the rows go in as one binary COPY. When the batch is at least as large as
        the table (a bulk import), the HNSW index is dropped and built again after the COPY:
        pgvector inserts into the graph one row at a time, and its build is several times faster
        per row. The rebuild holds the table's exclusive lock until commit,
        and ends with ANALYZE so the planner knows the tenants' sizes."""
        rows = []
        for item in items:
            if item.id is not None:
                raise ValueError(f"item {item.id} is already stored; add() takes new items (id None)")
            vector = np.ascontiguousarray(item.embedding, dtype=np.float32)
            if vector.shape != (self.dim,):
                raise ValueError(f"the embedding has shape {vector.shape}, but this repository holds dim {self.dim}")
            rows.append(_copied(item, vector))
        if not rows:
            return []
        async with self._db.pool.connection() as conn, conn.transaction():
            drawn = await (
                await conn.execute(
                    "SELECT nextval(pg_get_serial_sequence('knowledge_items', 'id')) FROM generate_series(1, %s)", (len(rows),)
                )
            ).fetchall()
            note_ids = sorted(int(id_) for (id_,) in drawn)
            rebuild = len(rows) >= _REBUILD_MIN and len(rows) >= await _count(conn)
            if rebuild:
                await conn.execute(f"DROP INDEX {KNOWLEDGE.index}")
            async with conn.cursor() as cursor, cursor.copy(
                f"COPY knowledge_items ({_COLUMNS}) FROM STDIN (FORMAT BINARY)"
            ) as copy:
                copy.set_types(_COPIED_TYPES)
                for note_id, row in zip(note_ids, rows, strict=True):
                    await copy.write_row((note_id, *row))
            if rebuild:
                total = await _count(conn)
                memory = min(_BUILD_MEMORY_MAX_MB, max(64, total * (self.dim * 4 + 512) * 3 // 2 // 2**20))
                await conn.execute(f"SET LOCAL maintenance_work_mem = '{memory}MB'")
                await conn.execute(KNOWLEDGE.index_sql)
                # Statistics for the planner: without them it estimates one row per tenant
                # and never takes the HNSW index.
                await conn.execute("ANALYZE knowledge_items")
        return note_ids

    @on_database(retry=True)
    async def get(self, note_id: int) -> KnowledgeItem:
        async with self._db.pool.connection() as conn:
            return await _get(conn, note_id)

    @on_database(retry=True)
    async def items(self, statuses: Collection[NoteStatus] | None = None) -> list[KnowledgeItem]:
        where, params = ("", ()) if statuses is None else (" WHERE status = ANY(%s)", ([s.value for s in statuses],))
        async with self._db.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(f"SELECT {_COLUMNS} FROM knowledge_items{where} ORDER BY id", params)
            return [_item(row) for row in await cursor.fetchall()]

    @on_database(retry=True)
    async def search(
        self,
        vector: Vectors,
        k: int,
        *,
        caller: LayerIds,
        layer: Layer,
        statuses: Collection[NoteStatus],
        min_similarity: float = 0.0,
    ) -> list[tuple[KnowledgeItem, float]]:
        owners = caller.visible_owners(layer)
        query = np.ascontiguousarray(vector, dtype=np.float32).reshape(-1)
        if k <= 0 or not owners or not statuses or not query.any():
            return []
        where, params = _owner_match(owners)
        async with self._db.pool.connection() as conn:
            rows = await nearest(
                conn, "id", "knowledge_items", "embedding", f"({where}) AND status = ANY(%s)",
                (*params, [s.value for s in statuses]), query, k,
            )
            hits = [(int(id_), float(score)) for id_, score in rows if score >= min_similarity]
            items = await _many(conn, [id_ for id_, _ in hits])
        return [(items[id_], score) for id_, score in hits]

    @on_database(retry=True)
    async def keyword_search(
        self, text: str, k: int, *, caller: LayerIds, layer: Layer, statuses: Collection[NoteStatus]
    ) -> list[tuple[KnowledgeItem, float]]:
        owners = caller.visible_owners(layer)
        words = websearch_text(text)
        if k <= 0 or not owners or not statuses or not words:
            return []
        where, params = _owner_match(owners)
        async with self._db.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(
                f"SELECT {_COLUMNS}, ts_rank_cd(words, q) AS keyword_score FROM knowledge_items, {WORDS} AS q "
                f"WHERE ({where}) AND status = ANY(%s) AND words @@ q ORDER BY keyword_score DESC, id LIMIT %s",
                (words, *params, [s.value for s in statuses], k),
            )
            return [(_item(row), float(row["keyword_score"])) for row in await cursor.fetchall()]

    @on_database
    async def record_retrievals(
        self, note_ids: Sequence[int], query: str, session: Scope | None, at: datetime, turn_id: str | None = None
    ) -> list[KnowledgeItem]:
        if not note_ids:
            return []
        chain = (None,) * 6 if session is None else scope_values(session)
        async with self._db.pool.connection() as conn, conn.transaction():
            await _bump(conn, Counter(note_ids), "retrieval_count", at)
            async with conn.cursor() as cursor:
                await cursor.executemany(
                    f"INSERT INTO note_retrievals (note_id, query, {SCOPE_COLUMNS_SQL}, at, turn_id) "
                    f"VALUES (%s, %s, {SCOPE_MARKS}, %s, %s)",
                    [(note_id, query, *chain, at, turn_id) for note_id in note_ids],
                )
            items = await _many(conn, note_ids)
        return [items[note_id] for note_id in note_ids]

    @on_database(retry=True)
    async def retrievals(self, note_id: int) -> list[Retrieval]:
        async with self._db.pool.connection() as conn:
            await _require(conn, [note_id])
            rows: list[tuple[Any, ...]] = await (
                await conn.execute(
                    f"SELECT note_id, query, at, turn_id, {SCOPE_COLUMNS_SQL} FROM note_retrievals WHERE note_id = %s ORDER BY seq",
                    (note_id,),
                )
            ).fetchall()
        return [
            Retrieval(id_, query, chain[5], at, None if chain[0] is None else row_scope(chain), turn_id)
            for id_, query, at, turn_id, *chain in rows
        ]

    @on_database
    async def credit_session(self, session: Scope, at: datetime, turn_id: str | None = None) -> list[KnowledgeItem]:
        if session.session_id is None:
            raise ValueError(f"feedback is given on a session, and {session!r} names none; pass its history_scope")
        where, params = scope_match(session)
        if turn_id is not None:
            where, params = f"{where} AND turn_id = %s", [*params, turn_id]
        async with self._db.pool.connection() as conn, conn.transaction():
            rows: list[tuple[Any, ...]] = await (
                await conn.execute(
                    f"INSERT INTO note_feedback (note_id, {SCOPE_COLUMNS_SQL}, at) "
                    f"SELECT DISTINCT note_id, {SCOPE_MARKS}, %s::timestamptz FROM note_retrievals WHERE {where} "
                    "ON CONFLICT DO NOTHING RETURNING note_id",
                    (*scope_values(session), at, *params),
                )
            ).fetchall()
            note_ids = sorted(int(note_id) for (note_id,) in rows)
            await _bump(conn, Counter(note_ids), "usefulness_score", at)
            items = await _many(conn, note_ids)
        return [items[note_id] for note_id in note_ids]

    @on_database
    async def add_reference(self, note_id: int, at: datetime) -> KnowledgeItem:
        async with self._db.pool.connection() as conn, conn.transaction():
            await _bump(conn, Counter([note_id]), "reference_count", at)
            return await _get(conn, note_id)

    @on_database
    async def set_flag(self, note_id: int, flagged: bool, at: datetime) -> KnowledgeItem:
        async with self._db.pool.connection() as conn:
            await _require(conn, [note_id])
            await conn.execute(
                "UPDATE knowledge_items SET flagged_for_review = %s, updated_at = %s WHERE id = %s", (flagged, at, note_id)
            )
            return await _get(conn, note_id)

    @on_database
    async def set_status(
        self, note_id: int, expected: NoteStatus, target: NoteStatus, at: datetime
    ) -> KnowledgeItem | None:
        async with self._db.pool.connection() as conn:
            await _require(conn, [note_id])
            async with conn.cursor(row_factory=dict_row) as cursor:
                await cursor.execute(
                    f"UPDATE knowledge_items SET status = %s, updated_at = %s WHERE id = %s AND status = %s RETURNING {_COLUMNS}",
                    (target.value, at, note_id, expected.value),
                )
                row = await cursor.fetchone()
        return None if row is None else _item(row)

    @on_database
    async def add_merge_suggestion(self, suggestion: MergeSuggestion) -> bool:
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(
                "INSERT INTO merge_suggestions (first_id, second_id, similarity, created_at) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING",
                (suggestion.first_id, suggestion.second_id, suggestion.similarity, suggestion.created_at),
            )
            return cursor.rowcount == 1

    @on_database(retry=True)
    async def merge_suggestions(self) -> list[MergeSuggestion]:
        async with self._db.pool.connection() as conn:
            rows: list[tuple[Any, ...]] = await (
                await conn.execute(
                    "SELECT first_id, second_id, similarity, created_at FROM merge_suggestions ORDER BY created_at, first_id"
                )
            ).fetchall()
        return [MergeSuggestion(*row) for row in rows]



async def _get(conn: psycopg.AsyncConnection[Any], note_id: int) -> KnowledgeItem:
    items = await _many(conn, [note_id])
    if note_id not in items:
        raise UnknownNoteError(note_id)
    return items[note_id]


async def _many(conn: psycopg.AsyncConnection[Any], note_ids: Sequence[int]) -> dict[int, KnowledgeItem]:
    """The stored notes among `note_ids`, by id."""
    ids = [note_id for note_id in note_ids if note_id in _BIGINT]
    if not ids:
        return {}
    async with conn.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(f"SELECT {_COLUMNS} FROM knowledge_items WHERE id = ANY(%s)", (ids,))
        return {row["id"]: _item(row) for row in await cursor.fetchall()}


async def _require(conn: psycopg.AsyncConnection[Any], note_ids: Sequence[int]) -> None:
    """UnknownNoteError for the first of `note_ids` that names no note."""
    ids = [note_id for note_id in note_ids if note_id in _BIGINT]
    rows = await (await conn.execute("SELECT id FROM knowledge_items WHERE id = ANY(%s)", (ids,))).fetchall()
    known = {row[0] for row in rows}
    for note_id in note_ids:
        if note_id not in known:
            raise UnknownNoteError(note_id)


async def _bump(conn: psycopg.AsyncConnection[Any], counts: Counter[int], column: str, at: datetime) -> None:
    """Add `counts[id]` to `column` of each note, locking the rows in id order first so
    two writers bumping the same notes never deadlock (inside the caller's transaction).
    The lock is the one an UPDATE takes, which lets rows that refer to the notes (retrievals,
    feedback) be inserted meanwhile."""
    ids = sorted(counts)
    if not ids:
        return
    await _require(conn, ids)
    await conn.execute("SELECT id FROM knowledge_items WHERE id = ANY(%s) ORDER BY id FOR NO KEY UPDATE", (ids,))
    async with conn.cursor() as cursor:
        await cursor.executemany(
            f"UPDATE knowledge_items SET {column} = {column} + %s, updated_at = %s WHERE id = %s",
            [(counts[note_id], at, note_id) for note_id in ids],
        )
