"""A real PostgreSQL (16, with pgvector) for the tests that need one, started at most once per run.

The fixtures are `postgres_server` (the server, `tests/postgres_server.py`) and
`postgres_url` (an empty database for one test). `pgserver` runs it from a temporary directory with no system install; the server starts
when the first test asks for it and stops when the run ends. Each test gets an empty
database of its own, copied from a template that already has the vector extension (about
0.06 s with fsync off, which a throwaway server can afford).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from postgres_server import PostgresServer


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole run, started on first use, stopped and deleted at the end.

    Its directory is not under pytest's temporary root: pytest deletes old run directories
    there, which may be this one while it runs when other pytest runs start on the machine.
    """
    import pgserver  # here, so a run that needs no PostgreSQL never imports it

    server = pgserver.get_server(Path(tempfile.mkdtemp(prefix="agentloop-postgres-")), cleanup_mode="delete")
    try:
        yield PostgresServer(server)
    finally:
        server.cleanup()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of an empty database (with pgvector) that only this test uses."""
    url = postgres_server.new_database()
    yield url
    postgres_server.drop_database(url)
