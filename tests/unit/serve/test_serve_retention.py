"""`agentloop serve` with a retention: the server prunes the bot's stores as it starts."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

from agentloop.adapters import open_stores
from agentloop.messages import ChatMessage
from agentloop.retention import Retention
from agentloop.scopes import Scope
from serve_kit import client, settings

HISTORY = Scope("acme", user_id="alice", session_id="old-session")


def _messages(database: Path) -> int:
    with closing(sqlite3.connect(database)) as conn:
        (count,) = conn.execute("SELECT count(*) FROM session_messages WHERE scope_session = 'old-session'").fetchone()
    return int(count)


def test_a_server_with_a_retention_prunes_its_stores_once_started(tmp_path: Path) -> None:
    served = settings(tmp_path, retention=Retention(history_turns=1))
    with open_stores(served.stores) as stores:
        for n in range(4):
            asyncio.run(stores.sessions.append(HISTORY, [ChatMessage.user(f"q{n}"), ChatMessage.assistant(f"a{n}")]))
    database = Path(served.stores) / "bot.sqlite3"

    async def body() -> int:
        async with client(served) as http:
            assert (await http.get("/healthz")).status_code == 200
            for _ in range(400):  # the prune runs beside the server; wait for it, not for a time
                if _messages(database) == 2:
                    break
                await asyncio.sleep(0.05)
            return _messages(database)

    assert asyncio.run(body()) == 2
