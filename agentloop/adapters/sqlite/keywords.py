"""The keyword side of hybrid retrieval on SQLite: an FTS5 index (ranked by BM25) kept in
step with a table's texts by triggers, and queries that are valid FTS5 whatever the user typed."""

from __future__ import annotations

from collections.abc import Sequence

from agentloop.adapters.sqlite.schema import Step
from agentloop.retrieval import query_words


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


def fts5_query(text: str) -> str:
    """An FTS5 query matching rows that hold any word of `text` ('' when it has none). Each
    word is one quoted phrase, so FTS5 reads no operator, column or syntax in it, and an
    identifier FTS5 splits (`ORD-48213`) must appear whole, in order."""
    return " OR ".join('"' + word.replace('"', '""') + '"' for word in query_words(text))
