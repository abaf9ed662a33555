"""A bot's sent replies in their own SQLite file, `<bot>.replies.sqlite3` beside its other files."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

from agentloop.adapters.sqlite._connection import closing_on_error, connect
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
BUSY_TIMEOUT_MS = 30000
"""How long a write waits for another server process holding the file's lock."""


class SqliteReplies:
    """Replies in a SQLite file (created owner-only), called from the event loop through a worker thread."""

    def __init__(self, path: Path, bot: str) -> None:
        self.bot = bot
        self._lock = threading.Lock()
        self._conn = connect(path)
        with closing_on_error(self._conn):
            self._conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
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


def open_sqlite_replies(directory: Path, *, bot: str) -> SqliteReplies:
    """The replies of `bot` in `directory`; close them with `close`."""
    return SqliteReplies(directory / f"{bot}.replies.sqlite3", bot)
