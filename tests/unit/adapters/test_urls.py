"""Which backend a stores URL names: the one rule every command, the server and the workers ask."""

from __future__ import annotations

import pytest

from agentloop.adapters.urls import is_postgres_url


@pytest.mark.parametrize(
    "url", ["postgresql://ada@db/bots", "POSTGRESQL://ada@db/bots", "Postgres://ada@db/bots", "postgres://ada@db/bots"]
)
def test_a_postgresql_url_is_one_in_any_case_of_its_scheme(url: str) -> None:
    """The CLI, the server settings and the inbox once tested the scheme case-sensitively, the stores did not."""
    assert is_postgres_url(url)


@pytest.mark.parametrize("url", ["sqlite:///data", "data", "./postgresql", "mysql://ada@db/bots"])
def test_anything_else_is_not_a_postgresql_url(url: str) -> None:
    assert not is_postgres_url(url)
