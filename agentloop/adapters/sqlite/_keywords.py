"""The keyword side of hybrid retrieval on SQLite: an FTS5 index (ranked by BM25) kept in
step with a table's texts by triggers, and queries that are valid FTS5 whatever the user typed."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from agentloop.adapters.sqlite.schema import Step
from agentloop.retrieval import query_words

COMMON_WORD_TEXTS = 500
"""A query word held by more texts than this is left out of the keyword query: it tells the
texts apart hardly at all (BM25 gives it almost no weight), and FTS5 would rank every one."""


def keyword_step(table: str, columns: Sequence[str]) -> Step:
    """The step that indexes the words of `columns` of `table` in `<table>_words` (FTS5 over
    the table's own rows), with triggers that follow every insert, update and delete, and
    indexes the rows already stored."""
    words = f"{table}_words"
    listed = ", ".join(columns)
    new = ", ".join(f"new.{column}" for column in columns)
    old = ", ".join(f"old.{column}" for column in columns)
    remove = f"INSERT INTO {words} ({words}, rowid, {listed}) VALUES ('delete', old.id, {old});"
    add = f"INSERT INTO {words} (rowid, {listed}) VALUES (new.id, {new});"
    return Step(
        f"the words of {table} in an FTS5 index, so a search also finds texts by their exact words",
        (
            f"CREATE VIRTUAL TABLE {words} USING fts5({listed}, content='{table}', content_rowid='id')",
            f"CREATE TRIGGER {words}_insert AFTER INSERT ON {table} BEGIN {add} END",
            f"CREATE TRIGGER {words}_delete AFTER DELETE ON {table} BEGIN {remove} END",
            f"CREATE TRIGGER {words}_update AFTER UPDATE OF {listed} ON {table} BEGIN {remove} {add} END",
            f"INSERT INTO {words} ({words}) VALUES ('rebuild')",
        ),
    )


def fts5_query(text: str, *, leave_out: frozenset[str] = frozenset()) -> str:
    """An FTS5 query matching rows that hold any word of `text` but those in `leave_out`
    ('' when none is left). Each word is one quoted phrase, so FTS5 reads no operator,
    column or syntax in it, and an identifier FTS5 splits (`ORD-48213`) must appear whole, in order."""
    return " OR ".join('"' + word.replace('"', '""') + '"' for word in query_words(text) if word not in leave_out)


def distinctive_query(conn: sqlite3.Connection, words_table: str, text: str, common: set[str]) -> str:
    """`fts5_query(text)` without its words more than `COMMON_WORD_TEXTS` texts hold, so a
    query costs what its rare words match. `common` holds the words (case-folded) found
    common so far; texts are only ever added, so a common word stays common and is counted once."""
    words = query_words(text)
    if not words:
        return ""
    leave_out = set()
    for word in words:
        folded = word.casefold()
        if folded not in common:
            (held,) = conn.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM {words_table} WHERE {words_table} MATCH ? LIMIT ?)",
                (fts5_query(word), COMMON_WORD_TEXTS + 1),
            ).fetchone()
            if held <= COMMON_WORD_TEXTS:
                continue
            common.add(folded)
        leave_out.add(word)
    return fts5_query(text, leave_out=frozenset(leave_out))
