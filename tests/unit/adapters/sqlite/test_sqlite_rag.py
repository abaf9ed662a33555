"""SqliteRagStore: SQLite rows that rebuild a lost or stale index, and are re-checked on every
hit (the port's contract is checked by the conformance suite, tests/unit/adapters/test_store_conformance.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentloop.adapters import HashingEmbedder, SqliteRagStore
from agentloop.adapters.sqlite._connection import transaction_ended
from agentloop.adapters.errors import EmbedderMismatchError
from agentloop.scopes import Scope

A, B = Scope(project_id="a"), Scope(project_id="b")

TEXTS = [
    (A, "The deployment runs every night at two"),
    (A, "Invoices are sent on the first of the month"),
    (B, "The deployment of project b is manual"),
    (A, "Lunch is served at noon in the canteen"),
]


def fill(store: SqliteRagStore) -> None:
    for scope, text in TEXTS:
        store.add(scope, text, session_id="s1")


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_a_lost_or_truncated_index_is_rebuilt_with_identical_results(tmp_path: Path, damage: str) -> None:
    embedder = HashingEmbedder(dim=128)
    db, index = tmp_path / "bot.sqlite3", tmp_path / "bot.rag.hnsw"
    store = SqliteRagStore.open(db, embedder, index)
    fill(store)
    queries = ["deployment at night", "invoices", "canteen lunch"]
    before = [store.search(A, q, 3) for q in queries]
    store.close()
    if damage == "delete":
        index.unlink()
    else:
        index.write_bytes(index.read_bytes()[:100])
    reopened = SqliteRagStore.open(db, embedder, index)
    after = [reopened.search(A, q, 3) for q in queries]
    assert after == before
    reopened.close()


def test_an_embedder_of_another_dimension_is_refused(tmp_path: Path) -> None:
    store = SqliteRagStore.open(tmp_path / "bot.sqlite3", HashingEmbedder(dim=64), tmp_path / "bot.rag.hnsw")
    store.add(A, "hello world")
    store.close()
    with pytest.raises(EmbedderMismatchError, match="was embedded by 'hashing-v1/64', but it is opened with the embedder 'hashing-v1/32'"):
        SqliteRagStore.open(tmp_path / "bot.sqlite3", HashingEmbedder(dim=32), tmp_path / "other.hnsw")


def test_a_hit_whose_row_left_the_scope_is_not_returned(tmp_path: Path) -> None:
    """I11 rests on the rows, not only on the index's in-memory scope keys."""
    store = SqliteRagStore.open(tmp_path / "bot.sqlite3", HashingEmbedder(dim=128), tmp_path / "bot.rag.hnsw")
    fill(store)
    other = sqlite3.connect(tmp_path / "bot.sqlite3")
    other.execute("UPDATE rag_documents SET scope_org = 'globex' WHERE text LIKE 'The deployment runs%'")
    other.commit()
    other.close()
    assert "The deployment runs every night at two" not in [h.text for h in store.search(A, "deployment", 5)]
    store.close()


def test_a_text_rolled_back_with_its_transaction_is_not_indexed_and_its_id_serves_the_next(tmp_path: Path) -> None:
    """An add inside a transaction the file's thread opened for several calls is indexed only
    once that commits: rolled back, its id goes to the next text, which the index must take."""
    ada, bob = Scope(user_id="ada"), Scope(user_id="bob")
    store = SqliteRagStore.open(tmp_path / "bot.sqlite3", HashingEmbedder(), tmp_path / "bot.rag.hnsw")
    store._conn.execute("BEGIN IMMEDIATE")
    lost = store.add(ada, "The office opens at eight.")
    store._conn.execute("ROLLBACK")
    transaction_ended(store._conn, committed=False)
    kept = store.add(bob, "Parking is behind the building.")
    assert kept == lost
    assert [hit.text for hit in store.search(bob, "where is parking", 1)] == ["Parking is behind the building."]
    assert store.search(ada, "when does the office open", 1) == []
    store.close()
