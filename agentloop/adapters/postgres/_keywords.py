"""The keyword side of hybrid retrieval on PostgreSQL: a generated tsvector column with a GIN
index (the `simple` configuration, which keeps identifiers such as `ORD-48213` or
`db-07.eu-west.internal` whole and stems nothing), and queries valid whatever the user typed."""

from __future__ import annotations

from agentloop.adapters.postgres.schema import Step
from agentloop.retrieval import query_words

WORDS = "websearch_to_tsquery('simple'::regconfig, %s)"
"""The tsquery of `websearch_text`; websearch_to_tsquery never fails on its input."""


def keyword_step(table: str, text_sql: str) -> Step:
    """The step that gives `table` a `words` tsvector of `text_sql` (kept by PostgreSQL on
    every insert and update, computed for the rows already there) and its GIN index."""
    return Step(
        f"the words of {table} in a tsvector with a GIN index, so a search also finds texts by their exact words",
        (
            f"ALTER TABLE {table} ADD COLUMN words tsvector "
            f"GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, {text_sql})) STORED",
            f"CREATE INDEX {table}_by_words ON {table} USING gin (words)",
        ),
    )


def websearch_text(text: str) -> str:
    """The websearch query matching texts that hold any word of `text` ('' when it has none):
    each word quoted, so `-`, `or` and quotes in it are words, not operators."""
    return " or ".join(f'"{word.replace(chr(34), " ")}"' for word in query_words(text))
