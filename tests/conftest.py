"""A real PostgreSQL (16, with pgvector) for the tests that need one, started at most once per run.

The fixtures are `postgres_server` (the server, `tests/postgres_server.py`) and
`postgres_url` (an empty database for one test). `pgserver` runs it from a temporary directory with no system install; the server starts
when the first test asks for it and stops when the run ends. Each test gets an empty
database of its own, copied from a template that already has the vector extension (about
0.06 s with fsync off, which a throwaway server can afford).
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres_server import PostgresServer


class NetworkUsedError(OSError):
    """A test reached for a host other than this machine's loopback."""


def _loopback(address: Any) -> bool:
    host = address[0] if isinstance(address, tuple) else address
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True, scope="session")
def offline() -> Iterator[None]:
    """Every test runs as on the CI machine, which has no network: a connection to anything but
    this machine fails at once, naming the address (the embedders, the model adapters and the
    protocol clients all run against loopback)."""
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def refuse(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _loopback(address):
            raise NetworkUsedError(errno.ENETUNREACH, f"a test reached for {address!r}: tests reach only this machine")

    def guarded(sock: socket.socket, address: Any) -> None:
        refuse(sock, address)
        connect(sock, address)

    def guarded_ex(sock: socket.socket, address: Any) -> int:
        refuse(sock, address)
        return connect_ex(sock, address)

    socket.socket.connect, socket.socket.connect_ex = guarded, guarded_ex  # type: ignore[method-assign]
    try:
        yield
    finally:
        socket.socket.connect, socket.socket.connect_ex = connect, connect_ex  # type: ignore[method-assign]


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
