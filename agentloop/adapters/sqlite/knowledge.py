"""The embedded KnowledgeRepository: knowledge items in SQLite (WAL), searched through an
hnswlib index derived from the rows and rebuilt from them when missing or stale."""

from __future__ import annotations

import functools

from typing import Any

import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Collection, Iterator, Sequence
from datetime import datetime
from pathlib import Path

import numpy as np

from agentloop._log import get_logger
from agentloop.adapters.vectors.hnsw import DEFAULT_EF
from agentloop.adapters._rows import KNOWLEDGE_COLUMNS, knowledge_item, knowledge_values
from agentloop.adapters.vectors.scoped import ScopedVectorIndex, open_graph
from agentloop.adapters.sqlite._connection import on_commit, closing_on_error, connect, data_version, transaction
from agentloop.adapters.embedders.hashing import hashing_name
from agentloop.adapters.sqlite._embedders import check_embedder, record_step
from agentloop.adapters.sqlite._keywords import distinctive_query, keyword_step
from agentloop.adapters.sqlite.schema import Schema, Step, add_missing_columns, columns, has_table, migrate, rebuild
from agentloop.notes.errors import UnknownNoteError
from agentloop.retrieval import query_words
from agentloop.notes.models import (
    KnowledgeItem,
    Layer,
    LayerIds,
    MergeSuggestion,
    NoteStatus,
    Retrieval,
)
from agentloop.ports.vectors import Vectors
from agentloop.scopes import Scope, sees_unchained_history
from agentloop.adapters.sqlite._thread import OnItsThread
from agentloop.adapters.sqlite._subjects import Table, delete_rows, export_page, export_rows
from agentloop.adapters._subjects import Columns, NOTES, NO_CHAIN
from agentloop.privacy import Subject

_RELEASE_0_1 = (
    """CREATE TABLE IF NOT EXISTS knowledge_items (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        type TEXT NOT NULL,
        layer TEXT NOT NULL,
        company_id TEXT NOT NULL,
        org_id TEXT,
        team_id TEXT,
        project_id TEXT,
        status TEXT NOT NULL,
        title TEXT NOT NULL,
        markdown TEXT NOT NULL,
        embedding BLOB NOT NULL,
        metadata TEXT,
        retrieval_count INTEGER NOT NULL DEFAULT 0,
        usefulness_score INTEGER NOT NULL DEFAULT 0,
        reference_count INTEGER NOT NULL DEFAULT 0,
        flagged_for_review INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        updated_at TEXT
    )""",
    """CREATE TABLE IF NOT EXISTS note_retrievals (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        note_id INTEGER NOT NULL REFERENCES knowledge_items (id),
        query TEXT NOT NULL,
        session_id TEXT,
        at TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS note_retrievals_by_note ON note_retrievals (note_id)",
    "CREATE INDEX IF NOT EXISTS note_retrievals_by_session ON note_retrievals (session_id)",
    """CREATE TABLE IF NOT EXISTS note_feedback (
        note_id INTEGER NOT NULL REFERENCES knowledge_items (id),
        session_id TEXT NOT NULL,
        at TEXT NOT NULL,
        PRIMARY KEY (note_id, session_id)
    )""",
    """CREATE TABLE IF NOT EXISTS merge_suggestions (
        first_id INTEGER NOT NULL,
        second_id INTEGER NOT NULL,
        similarity REAL NOT NULL,
        created_at TEXT NOT NULL,
        PRIMARY KEY (first_id, second_id)
    )""",
)


def _session_chains(conn: sqlite3.Connection) -> None:
    """Retrievals gain the session's chain as NULL; feedback, whose key includes it, is
    copied into a new table with '' (both mean: the session id alone). A development build
    may have done either already."""
    add_missing_columns(conn, "note_retrievals", {"session_scope": "TEXT"})
    if "session_scope" not in columns(conn, "note_feedback"):
        rebuild(
            conn,
            "note_feedback",
            (
                "CREATE TABLE note_feedback (note_id INTEGER NOT NULL REFERENCES knowledge_items (id), "
                "session_id TEXT NOT NULL, at TEXT NOT NULL, session_scope TEXT NOT NULL DEFAULT '', "
                "PRIMARY KEY (note_id, session_id, session_scope))",
            ),
            lambda old: conn.execute(
                f"INSERT INTO note_feedback (note_id, session_id, at) SELECT note_id, session_id, at FROM {old}"
            ),
        )


_SESSION_SCOPE = Columns(
    "json_extract(session_scope, '$[0]')", "json_extract(session_scope, '$[1]')", "json_extract(session_scope, '$[2]')",
    "json_extract(session_scope, '$[3]')", "json_extract(session_scope, '$[4]')", session="session_id",
)
"""A retrieval's or feedback's chain, read from the key of the session's scope it keeps."""
TABLES = (
    Table("retrieval", "note_retrievals", _SESSION_SCOPE, note_column="note_id", key="seq"),
    Table("feedback", "note_feedback", _SESSION_SCOPE, note_column="note_id"),
    Table("merge_suggestion", "merge_suggestions", NO_CHAIN, note_column="first_id"),
    Table("merge_suggestion", "merge_suggestions", NO_CHAIN, note_column="second_id"),
    Table("status_change", "note_status_changes", NO_CHAIN, note_column="note_id"),
    Table("note", "knowledge_items", NOTES, note_column="id", key="id"),
)
"""What an erase or export of notes covers: the subject's sessions' retrievals (their queries) and
feedback, and the notes distilled from those sessions with every row about them (docs/adr/0028)."""
SCHEMA = Schema(
    "knowledge",
    (
        Step("notes, retrievals, feedback and merge suggestions (release 0.1)", _RELEASE_0_1),
        Step("retrievals and feedback name the session by its whole chain", run=_session_chains),
        Step(
            "every status change is logged, so other processes' indexes follow it",
            (
                "CREATE TABLE note_status_changes (seq INTEGER PRIMARY KEY, note_id INTEGER NOT NULL)",
                "CREATE TRIGGER note_status_changed AFTER UPDATE OF status ON knowledge_items "
                "WHEN old.status IS NOT new.status "
                "BEGIN INSERT INTO note_status_changes (note_id) VALUES (new.id); END",
            ),
        ),
        record_step("knowledge_items", "embedding"),
        Step(
            "retrievals name the turn that was shown the notes, so feedback on a turn credits them",
            ("ALTER TABLE note_retrievals ADD COLUMN turn_id TEXT",),
        ),
        keyword_step("knowledge_items", ("title", "markdown")),
    ),
    has_table("knowledge_items"),
)

_COLUMNS = ", ".join(("id", *KNOWLEDGE_COLUMNS))
_KEYWORD_HITS = (
    f"SELECT {', '.join(f'knowledge_items.{column}' for column in ('id', *KNOWLEDGE_COLUMNS))}, "
    "-bm25(knowledge_items_words) AS keyword_score "
    "FROM knowledge_items_words JOIN knowledge_items ON id = knowledge_items_words.rowid "
    "WHERE knowledge_items_words MATCH ? AND status IN ({statuses}) AND ({owners}) "
    "ORDER BY bm25(knowledge_items_words) LIMIT ?"
)
"""The notes holding a query's words among those of some statuses and owners, best BM25 first."""
_OWNED_BY = "(company_id IS ? AND org_id IS ? AND team_id IS ? AND project_id IS ?)"
_LAST_ID = (
    "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'knowledge_items'), 0), "
    "coalesce((SELECT max(id) FROM knowledge_items), 0))"
)
"""The last id AUTOINCREMENT gave (it never gives one twice, even after the row is gone)."""

_Owner = tuple[str, str | None, str | None, str | None]
# Retrievals and feedback name the session by its whole chain (`Scope.key`) in
# `session_scope`; rows from before that are NULL (retrievals) or '' (feedback) and
# belong to the session id alone, so only a chain that sees unchained history credits them.
_RETRIEVALS_OF = "session_id = ? AND (session_scope = ? OR (? AND session_scope IS NULL))"
_FEEDBACK_OF = "session_id = ? AND (session_scope = ? OR (? AND session_scope = ''))"

# The ids SQLite can hold (signed 64-bit); any other id names no note rather than overflowing.
_SQLITE_INTEGERS = range(-(2**63), 2**63)


_Key = tuple[_Owner, NoteStatus]
"""What a search filters notes by: their tenant chain and status."""


def _owner(ids: LayerIds) -> _Owner:
    return (ids.company_id, ids.org_id, ids.team_id, ids.project_id)


def _key_of(row: sqlite3.Row) -> _Key:
    return (row["company_id"], row["org_id"], row["team_id"], row["project_id"]), NoteStatus(row["status"])


class SqliteKnowledgeRepository:
    """Knowledge items, retrievals, feedback and merge suggestions in one SQLite file.

    The vector index lives next to it (`<path>.hnsw` unless told) and is saved on
    `close()`; if it is missing or its count disagrees with the rows it is rebuilt. Each
    (tenant chain, status)'s vectors are also kept together in memory, so a search plans
    by how many notes the caller may see (`ScopedVectorIndex`); every returned row is
    checked again (I11).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        dim: int,
        embedder: str | None = None,
        index_path: str | os.PathLike[str] | None = None,
        ef: int = DEFAULT_EF,
    ) -> None:
        """Open the notes at `path`, made by the embedder named `embedder` (default: the
        HashingEmbedder of `dim`); a file made by another is refused (EmbedderMismatchError)."""
        self.path = Path(path)
        self.dim = dim
        self._lock = threading.Lock()
        self._common_words: set[str] = set()  # left out of keyword queries (`distinctive_query`)
        self._conn = connect(self.path)
        self._conn.row_factory = sqlite3.Row
        self._log = get_logger("agentloop.knowledge").bind(path=str(self.path))
        with closing_on_error(self._conn):
            migrate(self._conn, SCHEMA)
            check_embedder(self._conn, "knowledge_items", embedder or hashing_name(dim), dim)
            (count,) = self._conn.execute("SELECT count(*) FROM knowledge_items").fetchone()
            graph = open_graph(
                Path(index_path) if index_path is not None else self.path.with_name(self.path.name + ".hnsw"),
                dim,
                count,
                self._vectors,
                ef=ef,
            )
            self._index: ScopedVectorIndex[_Key] = ScopedVectorIndex(graph)
            # What this process has read: another connection's commit changes `PRAGMA
            # data_version`; notes are only appended (read above `_read_to`) and their
            # status changes are logged (read above `_status_seq`), so catching up is two small queries.
            self._data_version = data_version(self._conn)
            (self._status_seq,) = self._conn.execute("SELECT coalesce(max(seq), 0) FROM note_status_changes").fetchone()
            self._read_to = 0
            self._read_new_notes()

    def _catch_up(self) -> None:
        """Take in the notes and status changes other processes committed since the last
        look (caller holds the lock); when there were none this is one PRAGMA."""
        version = data_version(self._conn)
        if version == self._data_version:
            return
        self._data_version = version
        self._read_new_notes()
        changes = self._conn.execute(
            "SELECT seq, id, company_id, org_id, team_id, project_id, status FROM note_status_changes "
            "JOIN knowledge_items ON id = note_id WHERE seq > ? ORDER BY seq",
            (self._status_seq,),
        ).fetchall()
        for row in changes:
            self._index.move(row["id"], _key_of(row))
        if changes:
            self._status_seq = changes[-1]["seq"]

    def _read_new_notes(self) -> None:
        """Take in the notes above `_read_to` with their vectors; the graph indexes those it
        lacks (on open, only those stored after the index file was read)."""
        rows = self._conn.execute(
            "SELECT id, company_id, org_id, team_id, project_id, status, embedding FROM knowledge_items "
            "WHERE id > ? ORDER BY id",
            (self._read_to,),
        ).fetchall()
        if not rows:
            return
        self._read_to = rows[-1]["id"]
        self._index.add(
            [_key_of(row) for row in rows],
            [row["id"] for row in rows],
            np.frombuffer(b"".join(row["embedding"] for row in rows), dtype=np.float32).reshape(len(rows), self.dim),
        )

    def _vectors(self) -> Iterator[tuple[int, Vectors]]:
        for row in self._conn.execute("SELECT id, embedding FROM knowledge_items ORDER BY id"):
            yield row["id"], np.frombuffer(row["embedding"], dtype=np.float32)

    def __len__(self) -> int:
        with self._lock:
            self._catch_up()
            return len(self._index)

    def add(self, item: KnowledgeItem) -> KnowledgeItem:
        (note_id,) = self.add_many([item])
        return self.get(note_id)

    def add_many(self, items: Sequence[KnowledgeItem]) -> list[int]:
        """Store new items in one transaction and one index insert (bulk import); their ids."""
        keys: list[_Key] = []
        for item in items:
            if item.id is not None:
                raise ValueError(f"item {item.id} is already stored; add() takes new items (id None)")
            if item.embedding.shape != (self.dim,):
                raise ValueError(f"the embedding has shape {item.embedding.shape}, but this repository holds dim {self.dim}")
            keys.append((_owner(item.layer_ids), item.status))
        if not keys:
            return []
        vectors = np.stack([item.embedding for item in items]).astype(np.float32, copy=False)
        rows = [knowledge_values(item) for item in items]
        with self._lock, transaction(self._conn):
            # One statement for the batch: the ids are the next ones AUTOINCREMENT would give
            # (nobody else writes inside BEGIN IMMEDIATE), numbered here so they are known.
            (last,) = self._conn.execute(_LAST_ID).fetchone()
            note_ids = list(range(last + 1, last + 1 + len(rows)))
            self._conn.executemany(
                f"INSERT INTO knowledge_items ({_COLUMNS}) VALUES ({', '.join('?' * (len(KNOWLEDGE_COLUMNS) + 1))})",
                [(note_id, *row) for note_id, row in zip(note_ids, rows, strict=True)],
            )
        self._index.add(keys, note_ids, vectors)
        return note_ids

    def get(self, note_id: int) -> KnowledgeItem:
        with self._lock:
            return self._get(note_id)

    def items(self, statuses: Collection[NoteStatus] | None = None) -> list[KnowledgeItem]:
        query, values = f"SELECT {_COLUMNS} FROM knowledge_items", tuple(sorted(s.value for s in statuses or ()))
        if statuses is not None:
            query += f" WHERE status IN ({','.join('?' * len(values))})"
        with self._lock:
            return [knowledge_item(row) for row in self._conn.execute(query + " ORDER BY id", values)]

    def _get(self, note_id: int) -> KnowledgeItem:
        if note_id not in _SQLITE_INTEGERS:
            raise UnknownNoteError(note_id)
        row = self._conn.execute(f"SELECT {_COLUMNS} FROM knowledge_items WHERE id = ?", (note_id,)).fetchone()
        if row is None:
            raise UnknownNoteError(note_id)
        return knowledge_item(row)

    def _many(self, note_ids: Sequence[int]) -> dict[int, KnowledgeItem]:
        marks = ",".join("?" * len(note_ids))
        rows = self._conn.execute(f"SELECT {_COLUMNS} FROM knowledge_items WHERE id IN ({marks})", tuple(note_ids))
        return {row["id"]: knowledge_item(row) for row in rows}

    def search(
        self,
        vector: Vectors,
        k: int,
        *,
        caller: LayerIds,
        layer: Layer,
        statuses: Collection[NoteStatus],
        min_similarity: float = 0.0,
    ) -> list[tuple[KnowledgeItem, float]]:
        wanted = frozenset(statuses)
        owners = {_owner(ids) for ids in caller.visible_owners(layer)}
        with self._lock:
            self._catch_up()
        hits = self._index.search(vector, k, {(owner, status) for owner in owners for status in wanted})
        hits = [(i, s) for i, s in hits if s >= min_similarity]
        if not hits:
            return []
        with self._lock:
            items = self._many([i for i, _ in hits])
        results = []
        for note_id, similarity in hits:
            item = items.get(note_id)
            # The row itself, not the in-memory keys, must be in the caller's chain (I11).
            if item is None or item.status not in wanted or _owner(item.layer_ids) not in owners:
                self._log.error("knowledge.search.rejected_row", note_id=note_id)
                continue
            results.append((item, similarity))
        return results

    def keyword_search(
        self, text: str, k: int, *, caller: LayerIds, layer: Layer, statuses: Collection[NoteStatus]
    ) -> list[tuple[KnowledgeItem, float]]:
        """Up to `k` notes visible to `caller` (I11) with these statuses whose title or text
        holds words of `text`, best BM25 first, each with its BM25 score (higher is better)."""
        owners = sorted({_owner(ids) for ids in caller.visible_owners(layer)}, key=repr)
        wanted = sorted(status.value for status in statuses)
        if k <= 0 or not owners or not wanted:
            return []
        sql = _KEYWORD_HITS.format(statuses=",".join("?" * len(wanted)), owners=" OR ".join([_OWNED_BY] * len(owners)))
        with self._lock:
            query = distinctive_query(self._conn, "knowledge_items_words", text, self._common_words)
            if not query:
                return []
            rows = self._conn.execute(sql, (query, *wanted, *(part for owner in owners for part in owner), k)).fetchall()
        return [(knowledge_item(row), float(row["keyword_score"])) for row in rows]

    def record_retrievals(
        self, note_ids: Sequence[int], query: str, session: Scope | None, at: datetime, turn_id: str | None = None
    ) -> list[KnowledgeItem]:
        if not note_ids:
            return []
        stamp = at.isoformat()
        session_id, scope_key = (None, None) if session is None else (session.session_id, session.key)
        with self._lock, transaction(self._conn):
            self._require(note_ids)
            self._conn.executemany(
                "UPDATE knowledge_items SET retrieval_count = retrieval_count + 1, updated_at = ? WHERE id = ?",
                [(stamp, i) for i in note_ids],
            )
            self._conn.executemany(
                "INSERT INTO note_retrievals (note_id, query, session_id, at, session_scope, turn_id) VALUES (?,?,?,?,?,?)",
                [(i, query, session_id, stamp, scope_key, turn_id) for i in note_ids],
            )
            items = self._many(note_ids)
        return [items[i] for i in note_ids]

    def retrievals(self, note_id: int) -> list[Retrieval]:
        with self._lock:
            self._require([note_id])
            rows = self._conn.execute(
                "SELECT note_id, query, session_id, at, session_scope, turn_id FROM note_retrievals WHERE note_id = ? ORDER BY seq",
                (note_id,),
            ).fetchall()
        return [
            Retrieval(
                r["note_id"], r["query"], r["session_id"], datetime.fromisoformat(r["at"]),
                None if r["session_scope"] is None else Scope.from_key(r["session_scope"]), r["turn_id"],
            )
            for r in rows
        ]

    def credit_session(self, session: Scope, at: datetime, turn_id: str | None = None) -> list[KnowledgeItem]:
        stamp = at.isoformat()
        if session.session_id is None:
            raise ValueError(f"feedback is given on a session, and {session!r} names none; pass its history_scope")
        whose = (session.session_id, session.key, sees_unchained_history(session))
        of_turn, turn = ("", ()) if turn_id is None else (" AND turn_id = ?", (turn_id,))
        with self._lock, transaction(self._conn):
            rows = self._conn.execute(
                f"SELECT DISTINCT note_id FROM note_retrievals WHERE {_RETRIEVALS_OF}{of_turn} AND note_id NOT IN "
                f"(SELECT note_id FROM note_feedback WHERE {_FEEDBACK_OF}) ORDER BY note_id",
                whose + turn + whose,
            ).fetchall()
            note_ids = [row["note_id"] for row in rows]
            self._conn.executemany(
                "INSERT INTO note_feedback (note_id, session_id, at, session_scope) VALUES (?,?,?,?)",
                [(i, session.session_id, stamp, session.key) for i in note_ids],
            )
            self._conn.executemany(
                "UPDATE knowledge_items SET usefulness_score = usefulness_score + 1, updated_at = ? WHERE id = ?",
                [(stamp, i) for i in note_ids],
            )
            items = self._many(note_ids) if note_ids else {}
        return [items[i] for i in note_ids]

    def add_reference(self, note_id: int, at: datetime) -> KnowledgeItem:
        return self._update(note_id, "reference_count = reference_count + 1", (), at)

    def set_flag(self, note_id: int, flagged: bool, at: datetime) -> KnowledgeItem:
        return self._update(note_id, "flagged_for_review = ?", (int(flagged),), at)

    def set_status(
        self, note_id: int, expected: NoteStatus, target: NoteStatus, at: datetime
    ) -> KnowledgeItem | None:
        with self._lock, transaction(self._conn):
            current = self._get(note_id)
            if current.status is not expected:
                return None
            self._conn.execute(
                "UPDATE knowledge_items SET status = ?, updated_at = ? WHERE id = ?", (target.value, at.isoformat(), note_id)
            )
            self._index.move(note_id, (_owner(current.layer_ids), target))
            return self._get(note_id)

    def add_merge_suggestion(self, suggestion: MergeSuggestion) -> bool:
        with self._lock:
            cursor = self._conn.execute(
                "INSERT OR IGNORE INTO merge_suggestions (first_id, second_id, similarity, created_at) VALUES (?,?,?,?)",
                (suggestion.first_id, suggestion.second_id, suggestion.similarity, suggestion.created_at.isoformat()),
            )
            return cursor.rowcount == 1

    def merge_suggestions(self) -> list[MergeSuggestion]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT first_id, second_id, similarity, created_at FROM merge_suggestions ORDER BY created_at, first_id"
            ).fetchall()
        return [
            MergeSuggestion(r["first_id"], r["second_id"], r["similarity"], datetime.fromisoformat(r["created_at"]))
            for r in rows
        ]

    def save_index(self) -> None:
        """Write the vector index file so the next open need not rebuild it; it first takes
        in the notes other processes stored, and leaves a file that holds more in place."""
        with self._lock:
            self._catch_up()
        self._index.save(keep_larger=True)

    def erase(self, subject: Subject) -> int:
        """Delete `subject`'s rows, in one transaction; how many."""
        with self._lock, transaction(self._conn):
            removed = delete_rows(self._conn, subject, TABLES)
            on_commit(self._conn, functools.partial(self._index.remove, sorted(subject.notes)))
        return removed

    def export_page(self, subject: Subject, table: Table, after: object) -> list[dict[str, Any]]:
        return export_page(self._conn, self._lock, subject, table, after)

    def close(self) -> None:
        """Save the index, and close the connection even when saving fails."""
        try:
            self.save_index()
        finally:
            with self._lock:
                self._conn.close()

    def _update(self, note_id: int, assignment: str, values: tuple[object, ...], at: datetime) -> KnowledgeItem:
        with self._lock, transaction(self._conn):
            self._require([note_id])
            self._conn.execute(
                f"UPDATE knowledge_items SET {assignment}, updated_at = ? WHERE id = ?", (*values, at.isoformat(), note_id)
            )
            return self._get(note_id)

    def _require(self, note_ids: Sequence[int]) -> None:
        if any(note_id not in self._index for note_id in note_ids):
            self._catch_up()  # another process may have stored it
        for note_id in note_ids:
            if note_id not in self._index:
                raise UnknownNoteError(note_id)


class AsyncSqliteKnowledgeRepository(OnItsThread[SqliteKnowledgeRepository]):
    """The KnowledgeRepository port on a `SqliteKnowledgeRepository` (`engine`)."""

    async def count(self) -> int:
        return await self._thread.read(self.engine.__len__)

    async def add(self, item: KnowledgeItem) -> KnowledgeItem:
        return await self._thread.run(self.engine.add, item)

    async def add_many(self, items: Sequence[KnowledgeItem]) -> list[int]:
        return await self._thread.run(self.engine.add_many, items)

    async def get(self, note_id: int) -> KnowledgeItem:
        return await self._thread.read(self.engine.get, note_id)

    async def items(self, statuses: Collection[NoteStatus] | None = None) -> list[KnowledgeItem]:
        return await self._thread.read(self.engine.items, statuses)

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
        return await self._thread.read(
            self.engine.search, vector, k, caller=caller, layer=layer, statuses=statuses, min_similarity=min_similarity
        )

    async def keyword_search(
        self, text: str, k: int, *, caller: LayerIds, layer: Layer, statuses: Collection[NoteStatus]
    ) -> list[tuple[KnowledgeItem, float]]:
        if not query_words(text):  # no word to look up: the engine would find none (most questions)
            return []
        return await self._thread.read(self.engine.keyword_search, text, k, caller=caller, layer=layer, statuses=statuses)

    async def record_retrievals(
        self, note_ids: Sequence[int], query: str, session: Scope | None, at: datetime, turn_id: str | None = None
    ) -> list[KnowledgeItem]:
        return await self._thread.run(self.engine.record_retrievals, note_ids, query, session, at, turn_id)

    async def retrievals(self, note_id: int) -> list[Retrieval]:
        return await self._thread.read(self.engine.retrievals, note_id)

    async def credit_session(self, session: Scope, at: datetime, turn_id: str | None = None) -> list[KnowledgeItem]:
        return await self._thread.run(self.engine.credit_session, session, at, turn_id)

    async def add_reference(self, note_id: int, at: datetime) -> KnowledgeItem:
        return await self._thread.run(self.engine.add_reference, note_id, at)

    async def set_flag(self, note_id: int, flagged: bool, at: datetime) -> KnowledgeItem:
        return await self._thread.run(self.engine.set_flag, note_id, flagged, at)

    async def set_status(
        self, note_id: int, expected: NoteStatus, target: NoteStatus, at: datetime
    ) -> KnowledgeItem | None:
        return await self._thread.run(self.engine.set_status, note_id, expected, target, at)

    async def add_merge_suggestion(self, suggestion: MergeSuggestion) -> bool:
        return await self._thread.run(self.engine.add_merge_suggestion, suggestion)

    async def merge_suggestions(self) -> list[MergeSuggestion]:
        return await self._thread.read(self.engine.merge_suggestions)

    async def erase(self, subject: Subject) -> int:
        return await self._thread.write(self.engine.erase, subject)

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        return export_rows(self._thread, self.engine.export_page, subject, (TABLES[0], TABLES[1], TABLES[-1]))
