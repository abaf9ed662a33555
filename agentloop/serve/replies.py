"""The outcomes a server running turns itself has sent, kept by message id, so a client that sends
the same message id again gets the stored outcome instead of a second turn.

A message id is one namespace per tenant chain and user (`message_scope`); the record keeps the
session and a digest of the message, so the same id with another session or text is told apart.
SQLite stores keep them in `<bot>.replies.sqlite3` beside the bot's other files; PostgreSQL stores
in the table `agentloop_serve_replies` of the same database.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import attrs

from agentloop.context import IncomingMessage, Session
from agentloop.outcome import converter

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agentloop_serve_replies (
    bot text NOT NULL,
    scope text NOT NULL,
    message_id text NOT NULL,
    session_id text NOT NULL,
    digest text NOT NULL,
    outcome text NOT NULL,
    PRIMARY KEY (bot, scope, message_id)
)
"""


@attrs.frozen
class Reply:
    """A message's stored outcome, with what it answered: its session and the digest of the message."""

    session_id: str
    digest: str
    outcome: dict[str, Any]


def message_scope(session: Session) -> str:
    """The namespace of a session's message ids, as text: its tenant chain and user."""
    return json.dumps([session.org_id, session.team_id, session.project_id, session.user_id], separators=(",", ":"))


def message_digest(incoming: IncomingMessage) -> str:
    """A digest of everything a message says, to tell a retry (the same) from another message under one id."""
    return hashlib.sha256(json.dumps(converter.unstructure(incoming), sort_keys=True).encode()).hexdigest()


class Replies(Protocol):
    """Where a server keeps the outcomes it sent; both calls are coroutines."""

    async def find(self, scope: str, message_id: str) -> Reply | None: ...

    async def keep(self, scope: str, message_id: str, reply: Reply) -> None:
        """Store `reply` unless one is stored under the id already (the first one stays)."""
        ...


class SqliteReplies:
    """Replies in a SQLite file, called from the event loop through a worker thread."""

    def __init__(self, path: Path, bot: str) -> None:
        self.bot = bot
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, timeout=30.0, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute(_SCHEMA)

    async def find(self, scope: str, message_id: str) -> Reply | None:
        return await asyncio.to_thread(self._find, scope, message_id)

    async def keep(self, scope: str, message_id: str, reply: Reply) -> None:
        await asyncio.to_thread(self._keep, scope, message_id, reply)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _find(self, scope: str, message_id: str) -> Reply | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT session_id, digest, outcome FROM agentloop_serve_replies WHERE bot = ? AND scope = ? AND message_id = ?",
                (self.bot, scope, message_id),
            ).fetchone()
        return None if row is None else Reply(row[0], row[1], json.loads(row[2]))

    def _keep(self, scope: str, message_id: str, reply: Reply) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR IGNORE INTO agentloop_serve_replies VALUES (?, ?, ?, ?, ?, ?)",
                (self.bot, scope, message_id, reply.session_id, reply.digest, json.dumps(reply.outcome)),
            )


class PostgresReplies:
    """Replies in a PostgreSQL table, on a small connection pool of their own."""

    def __init__(self, pool: Any, bot: str) -> None:
        self.bot = bot
        self._pool = pool

    async def find(self, scope: str, message_id: str) -> Reply | None:
        async with self._pool.connection() as conn:
            row = await (
                await conn.execute(
                    "SELECT session_id, digest, outcome FROM agentloop_serve_replies WHERE bot = %s AND scope = %s AND message_id = %s",
                    (self.bot, scope, message_id),
                )
            ).fetchone()
        return None if row is None else Reply(row[0], row[1], json.loads(row[2]))

    async def keep(self, scope: str, message_id: str, reply: Reply) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(
                "INSERT INTO agentloop_serve_replies VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (self.bot, scope, message_id, reply.session_id, reply.digest, json.dumps(reply.outcome)),
            )


@asynccontextmanager
async def open_replies(stores_url: str, bot: str) -> AsyncIterator[Replies]:
    """The replies of `bot` beside its stores at `stores_url` (the URL `Stores.url` gives), open for the block."""
    if stores_url.startswith(("postgresql://", "postgres://")):
        from psycopg_pool import AsyncConnectionPool  # the postgres extra

        async with AsyncConnectionPool(stores_url, min_size=1, max_size=4, kwargs={"autocommit": True}, open=False) as pool:
            async with pool.connection() as conn:
                await conn.execute(_SCHEMA)
            yield PostgresReplies(pool, bot)
        return
    replies = SqliteReplies(Path(stores_url.removeprefix("sqlite:///")) / f"{bot}.replies.sqlite3", bot)
    try:
        yield replies
    finally:
        replies.close()
