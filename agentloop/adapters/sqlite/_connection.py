"""Opening a bot's SQLite database the way every embedded store expects it."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from agentloop.adapters._private_files import private_file, private_folder


def connect(path: str | Path) -> sqlite3.Connection:
    """Open (creating the file and its folder if needed, owner-only) a SQLite database in WAL mode.

    Autocommit (`isolation_level=None`): a store groups statements with `transaction`.
    `check_same_thread=False` lets the asyncio thread and a writer thread share a
    connection that the store guards with its own lock. WAL with `synchronous=NORMAL`
    keeps a committed write durable across a process crash at a small cost.
    """
    if str(path) != ":memory:":
        path = Path(path)
        private_folder(path.parent)
        private_file(path)  # SQLite gives its -wal and -shm files this file's mode
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    with closing_on_error(conn):  # a file that is not a database fails here
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute("PRAGMA mmap_size=268435456")
    return conn


@contextmanager
def closing_on_error(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """Yield `conn`, closing it if the block raises: a store that fails to open (a
    schema that cannot be created, a bad file) lets go of its file at once."""
    try:
        yield conn
    except BaseException:
        conn.close()
        raise


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK when the block raises or the commit fails.

    Inside a transaction already open on `conn` (a file's thread committing several calls
    at once), a savepoint instead: a block that raises undoes its own writes (and drops its
    `on_commit` actions) only, and the others commit with the enclosing transaction."""
    if conn.in_transaction:
        waiting = _ON_COMMIT.setdefault(conn, [])
        mark = len(waiting)
        conn.execute("SAVEPOINT agentloop_call")
        try:
            yield
        except BaseException:
            if conn.in_transaction:  # some errors (a full disk) end the whole transaction
                conn.execute("ROLLBACK TO agentloop_call")
                conn.execute("RELEASE agentloop_call")
                del waiting[mark:]
            raise
        conn.execute("RELEASE agentloop_call")
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        roll_back(conn)
        raise
    transaction_ended(conn, committed=True)


def roll_back(conn: sqlite3.Connection) -> None:
    """Undo `conn`'s transaction if it is still open (a failed COMMIT, a deferred constraint,
    leaves it open; some errors end it themselves) and drop its `on_commit` actions."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    transaction_ended(conn, committed=False)


_ON_COMMIT: dict[sqlite3.Connection, list[Callable[[], object]]] = {}
"""The actions waiting for each connection's open transaction to commit (`on_commit`)."""


def on_commit(conn: sqlite3.Connection, action: Callable[[], object]) -> None:
    """Do `action` once what `conn` has written so far is committed: at once outside a
    transaction, else when the transaction commits, and never if its writes roll back.
    For what a store keeps in memory beside its rows (a cache, an index), so it never holds
    a row that was not kept. Actions run with the connection's lock held, as its writes did."""
    if conn.in_transaction:
        _ON_COMMIT.setdefault(conn, []).append(action)
    else:
        action()


def transaction_ended(conn: sqlite3.Connection, *, committed: bool) -> None:
    """Do the actions waiting on `conn`'s transaction, which has just committed, or drop
    them, as it rolled back; whoever ends a transaction outside `transaction` calls this."""
    actions = _ON_COMMIT.pop(conn, [])
    if committed:
        for action in actions:
            action()


def data_version(conn: sqlite3.Connection) -> int:
    """A number that changes whenever another connection (or process) commits to the
    database, and only then: the cheap check for "did the rows move on"."""
    (version,) = conn.execute("PRAGMA data_version").fetchone()
    return int(version)
