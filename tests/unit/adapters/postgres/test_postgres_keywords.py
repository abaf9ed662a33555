"""The full-text side of hybrid retrieval on PostgreSQL: the `simple` configuration keeps
identifiers whole, and any text makes a valid query."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop.adapters.postgres._keywords import WORDS, websearch_text

_TEXT = "Order ORD-48213 failed on db-07.eu-west.internal with E1042 after restarting"
_MATCH = f"SELECT to_tsvector('simple'::regconfig, %s) @@ {WORDS}"


@pytest.fixture
def conn(postgres_url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        yield connection


def matches(conn: psycopg.Connection[tuple[object, ...]], text: str, query: str) -> bool:
    row = conn.execute(_MATCH, (text, websearch_text(query))).fetchone()
    return row is not None and row[0] is True


def test_identifiers_match_whole_and_their_near_misses_do_not(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Why `simple`: an order number, a host name and an error code match as written, one
    that differs by a digit does not, and no stemming joins words a user did not write."""
    for found in ("what about ORD-48213?", "is db-07.eu-west.internal up", "E1042", "ord-48213"):
        assert matches(conn, _TEXT, found), found
    for missed in ("ORD-48214", "db-08.eu-west.internal", "E1043", "restart", "48213-ORD"):
        assert not matches(conn, _TEXT, missed), missed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text())
def test_any_text_makes_a_valid_query(conn: psycopg.Connection[tuple[object, ...]], text: str) -> None:
    words = websearch_text(text)
    if words:
        conn.execute(f"SELECT ts_rank_cd(to_tsvector('simple'::regconfig, %s), q) FROM {WORDS} AS q", (_TEXT, words))
