"""SqliteRagStore: scoped similarity search whose SQLite rows rebuild a lost or stale index."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentloop.adapters import HashingEmbedder, SqliteRagStore

TEXTS = [
    ("project:a", "The deployment runs every night at two"),
    ("project:a", "Invoices are sent on the first of the month"),
    ("project:b", "The deployment of project b is manual"),
    ("project:a", "Lunch is served at noon in the canteen"),
]


def fill(store: SqliteRagStore) -> None:
    for scope, text in TEXTS:
        store.add(scope, text, session_id="s1")


def test_search_finds_similar_texts_within_the_scope_only(tmp_path: Path) -> None:
    store = SqliteRagStore.open(tmp_path / "bot.sqlite3", HashingEmbedder(dim=128), tmp_path / "bot.rag.hnsw")
    fill(store)
    hits = store.search("project:a", "when does the deployment run", 2)
    assert hits[0].text == "The deployment runs every night at two" and hits[0].scope == "project:a"
    assert all(h.scope == "project:a" for h in hits) and hits[0].score >= hits[-1].score
    assert [h.text for h in store.search("project:b", "deployment", 5)] == ["The deployment of project b is manual"]
    assert store.search("project:c", "deployment", 5) == []
    assert store.search("project:a", "!!!", 5) == [] and store.search("project:a", "deployment", 0) == []
    assert len(store) == 4 and store.texts("project:b") == ["The deployment of project b is manual"]
    store.close()


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_a_lost_or_truncated_index_is_rebuilt_with_identical_results(tmp_path: Path, damage: str) -> None:
    embedder = HashingEmbedder(dim=128)
    db, index = tmp_path / "bot.sqlite3", tmp_path / "bot.rag.hnsw"
    store = SqliteRagStore.open(db, embedder, index)
    fill(store)
    queries = ["deployment at night", "invoices", "canteen lunch"]
    before = [store.search("project:a", q, 3) for q in queries]
    store.close()
    if damage == "delete":
        index.unlink()
    else:
        index.write_bytes(index.read_bytes()[:100])
    reopened = SqliteRagStore.open(db, embedder, index)
    after = [reopened.search("project:a", q, 3) for q in queries]
    assert after == before
    reopened.close()


def test_an_embedder_of_another_dimension_is_refused(tmp_path: Path) -> None:
    store = SqliteRagStore.open(tmp_path / "bot.sqlite3", HashingEmbedder(dim=64), tmp_path / "bot.rag.hnsw")
    store.add("s", "hello world")
    store.close()
    with pytest.raises(ValueError, match="dim 64 but the embedder makes dim 32"):
        SqliteRagStore.open(tmp_path / "bot.sqlite3", HashingEmbedder(dim=32), tmp_path / "other.hnsw")


def test_a_text_already_in_its_scope_is_not_stored_twice(tmp_path: Path) -> None:
    store = SqliteRagStore.open(tmp_path / "bot.sqlite3", HashingEmbedder(dim=64), tmp_path / "bot.rag.hnsw")
    first = store.add("user:a", "I don't know.")
    assert store.add("user:a", "I don't know.") == first
    assert store.add("user:b", "I don't know.") != first
    assert len(store) == 2 and store.texts("user:a") == ["I don't know."]
    store.close()
