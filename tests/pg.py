"""A real PostgreSQL for the tests: one server per test run (pgserver ships PostgreSQL 16
with pgvector and starts it in a temporary directory, no root or system install), and a
fresh database per test. Test modules import `postgres_url` as a fixture."""

from __future__ import annotations

import atexit
import tempfile
import uuid
from collections.abc import Iterator

import pgserver
import psycopg
import pytest

_server: pgserver.PostgresServer | None = None


def server() -> pgserver.PostgresServer:
    """The test run's server, started on first use and removed when the run ends."""
    global _server
    if _server is None:
        _server = pgserver.get_server(tempfile.mkdtemp(prefix="agentloop-pg-"), cleanup_mode="delete")
        atexit.register(_server.cleanup)
    return _server


def fresh_database() -> str:
    """The URL of a new, empty database on the test server."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server().get_uri(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server().get_uri(database=name)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A new database for one test."""
    yield fresh_database()
