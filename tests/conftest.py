"""A real PostgreSQL (16, with pgvector) for the tests that need one, started at most once per run.

The fixtures are `postgres_server` (the server, `tests/postgres_server.py`) and
`postgres_url` (an empty database for one test). `pgserver` runs it from a temporary directory with no system install; the server starts
when the first test asks for it and stops when the run ends. Each test gets an empty
database of its own, copied from a template that already has the vector extension (about
0.06 s with fsync off, which a throwaway server can afford).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import network_guard
import pytest
from postgres_server import PostgresServer


def pytest_configure(config: pytest.Config) -> None:
    """Python processes the tests start run under the network guard too (`offline`): its
    `sitecustomize` leads PYTHONPATH, which every subprocess helper passes on. Set before
    collection, as some test modules build their subprocess environment on import."""
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(network_guard.SITE), os.environ.get("PYTHONPATH")]))


@pytest.fixture(autouse=True, scope="session")
def offline() -> Iterator[None]:
    """Every test runs as on the CI machine, which has no network: a connection to anything but
    this machine, or a lookup of any name but its own, fails at once, naming the address (the
    embedders, the model adapters and the protocol clients all run against loopback)."""
    undo = network_guard.install()
    try:
        yield
    finally:
        undo()


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
