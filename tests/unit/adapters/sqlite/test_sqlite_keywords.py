"""The FTS5 side of hybrid retrieval: queries valid on any text, an index that follows its
table, and stores of the previous schema that get the index built on open."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from agentloop.adapters import HashingEmbedder, SqliteRagStore
from agentloop.adapters.sqlite._keywords import fts5_query, keyword_step
from agentloop.adapters.sqlite.rag import SCHEMA
from agentloop.scopes import Scope

_TEXTS = sqlite3.connect(":memory:", check_same_thread=False)
_TEXTS.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")
for _statement in keyword_step("notes", ("text",)).sql:
    _TEXTS.execute(_statement)
_TEXTS.executemany("INSERT INTO notes (text) VALUES (?)", [("Order ORD-48213 on db-07.eu-west.internal",), ('a "quoted" NEAR(x y) *',)])


@given(st.text())
def test_any_text_makes_a_valid_fts5_query(text: str) -> None:
    query = fts5_query(text)
    if query:
        _TEXTS.execute("SELECT rowid FROM notes_words WHERE notes_words MATCH ? ORDER BY bm25(notes_words)", (query,)).fetchall()


def test_an_identifier_matches_whole_and_in_order() -> None:
    def found(text: str) -> list[int]:
        return [row for (row,) in _TEXTS.execute("SELECT rowid FROM notes_words WHERE notes_words MATCH ?", (fts5_query(text),))]

    assert found("is ORD-48213 late?") == [1] and found("db-07.eu-west.internal") == [1]
    assert found("48213-ORD") == [] and found('"quoted" NEAR(x') == [2]


def test_deleting_or_replacing_a_text_takes_it_out_of_the_index() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)")
    for statement in keyword_step("notes", ("text",)).sql:
        conn.execute(statement)
    conn.executemany("INSERT INTO notes (text) VALUES (?)", [("ticket E1042",), ("ticket E2000",)])
    conn.execute("DELETE FROM notes WHERE id = 1")
    conn.execute("UPDATE notes SET text = 'ticket E3000' WHERE id = 2")
    match = "SELECT rowid FROM notes_words WHERE notes_words MATCH ?"
    assert [conn.execute(match, (fts5_query(word),)).fetchall() for word in ("E1042", "E2000", "E3000")] == [[], [], [(2,)]]


def test_a_store_of_the_previous_version_gets_its_texts_indexed_on_open(tmp_path: Path) -> None:
    path = tmp_path / "bot.sqlite3"
    store = SqliteRagStore.open(path, HashingEmbedder(), tmp_path / "bot.rag.hnsw")
    text_id = store.add(Scope(project_id="a"), "the disk of db-07.eu-west.internal filled up")
    store.close()
    with sqlite3.connect(path) as conn:  # back to the version before the keyword index
        conn.execute("DROP TABLE rag_documents_words")
        for trigger in ("insert", "delete", "update"):
            conn.execute(f"DROP TRIGGER rag_documents_words_{trigger}")
        before_words = next(n for n, step in enumerate(SCHEMA.steps) if "FTS5" in step.description)
        conn.execute("UPDATE schema_versions SET version = ? WHERE name = 'rag'", (before_words,))
    conn.close()
    again = SqliteRagStore.open(path, HashingEmbedder(), tmp_path / "bot.rag.hnsw")
    try:
        with sqlite3.connect(path) as check:
            rows = check.execute("SELECT rowid FROM rag_documents_words WHERE rag_documents_words MATCH ?", (fts5_query("db-07.eu-west.internal"),))
            assert rows.fetchall() == [(text_id,)]
        check.close()
    finally:
        again.close()
