"""A bot's sent replies in the table `agentloop_serve_replies` of its PostgreSQL database."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg_pool import AsyncConnectionPool

from agentloop.ports.replies import Reply

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


class PostgresReplies:
    """Replies in a PostgreSQL table, on a small connection pool of their own (on the server's event loop)."""

    def __init__(self, pool: AsyncConnectionPool[Any], bot: str) -> None:
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
async def open_postgres_replies(url: str, *, bot: str) -> AsyncIterator[PostgresReplies]:
    """The replies of `bot` in the database at `url` (the table made on first use), open for the block."""
    async with AsyncConnectionPool(url, min_size=1, max_size=4, kwargs={"autocommit": True}, open=False) as pool:
        async with pool.connection() as conn:
            await conn.execute(_SCHEMA)
        yield PostgresReplies(pool, bot)
