"""A real PostgreSQL (16, with pgvector) for the tests that need one, started at most once per run.

`pgserver` runs it from a temporary directory with no system install; the server starts
when the first test asks for it and stops when the run ends. Each test gets an empty
database of its own, copied from a template that already has the vector extension (about
0.06 s with fsync off, which a throwaway server can afford).
"""

from __future__ import annotations

import itertools
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

_TEMPLATE = "agentloop_template"


class PostgresServer:
    """The running server: `new_database()` makes an empty database and returns its URL."""

    def __init__(self, server: Any) -> None:
        self._server = server
        self._numbers = itertools.count(1)
        self.admin_url: str = server.get_uri("postgres")
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            for setting in ("fsync", "synchronous_commit", "full_page_writes"):  # a throwaway server need not survive a crash
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = off").format(sql.Identifier(setting)))
            conn.execute("SELECT pg_reload_conf()")
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(_TEMPLATE)))
        with psycopg.connect(self.url_of(_TEMPLATE), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")

    def url_of(self, database: str) -> str:
        return str(self._server.get_uri(database))

    def new_database(self) -> str:
        name = f"test_{next(self._numbers)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(sql.Identifier(name), sql.Identifier(_TEMPLATE)))
        return self.url_of(name)

    def drop_database(self, url: str) -> None:
        name = url.rsplit("/", 1)[1].split("?", 1)[0]
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole run, started on first use, stopped and deleted at the end.

    Its directory is not under pytest's temporary root: pytest deletes old run directories
    there, which may be this one while it runs when other pytest runs start on the machine.
    """
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset, as in CI containers
        warnings.simplefilter("ignore")
        import pgserver

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
