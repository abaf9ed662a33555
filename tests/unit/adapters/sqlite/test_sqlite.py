"""Opening SQLite stores: a store that fails to open keeps no file open."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from store_kit import open_descriptors

from agentloop.adapters import (
    HashingEmbedder,
    SqliteKnowledgeRepository,
    SqliteMemoryStore,
    SqliteRagStore,
    SqliteSessionStore,
    SqliteTaskStore,
    SqliteTrajectoryStore,
)


# Each store, how to open it on a file, and a table it indexes: a view of that name
# makes its schema creation fail on a file that is a sound database.
STORES: dict[str, tuple[Callable[[Path], object], str]] = {
    "sessions": (SqliteSessionStore.open, "session_messages"),
    "memory": (SqliteMemoryStore.open, "memory_entries"),
    "rag": (lambda path: SqliteRagStore.open(path, HashingEmbedder(), path.with_name("rag.hnsw")), "rag_documents"),
    "knowledge": (lambda path: SqliteKnowledgeRepository(path, dim=8), "note_retrievals"),
    "trajectories": (SqliteTrajectoryStore, "tool_executions"),
    "tasks": (SqliteTaskStore, "tasks"),
}


def not_a_database(path: Path) -> None:
    path.write_bytes(b"these are my notes, not a database\n" * 10)


def clashing_schema(path: Path, table: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute(f"CREATE VIEW {table} AS SELECT 1 AS id")
    db.close()


@pytest.mark.parametrize("damage", ["not a database", "a clashing schema"])
@pytest.mark.parametrize("store", sorted(STORES))
def test_a_store_that_fails_to_open_closes_its_file_at_once(tmp_path: Path, store: str, damage: str) -> None:
    opener, table = STORES[store]
    path = tmp_path / "store.sqlite3"
    if damage == "not a database":
        not_a_database(path)
    else:
        clashing_schema(path, table)
    with pytest.raises(sqlite3.DatabaseError) as failure:
        opener(path)
    # The traceback (kept alive here) holds the frames that opened the connection:
    # only an explicit close, not garbage collection, lets go of the file.
    assert failure.value is not None and open_descriptors(path) == []
