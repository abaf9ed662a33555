"""One bot's embedded stores: history, memory and RAG in one SQLite file, plus its index."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import attrs

from agentloop.adapters.hashing_embedder import HashingEmbedder
from agentloop.adapters.sqlite_memory import SqliteMemoryStore
from agentloop.adapters.sqlite_rag import SqliteRagStore
from agentloop.adapters.sqlite_sessions import SqliteSessionStore
from agentloop.names import check_bot_name
from agentloop.ports.vectors import Embedder


@attrs.define
class BotStores:
    """The stores of one bot: `<data_dir>/<bot>.sqlite3` and `<data_dir>/<bot>.rag.hnsw`."""

    path: Path
    sessions: SqliteSessionStore
    memory: SqliteMemoryStore
    rag: SqliteRagStore

    @classmethod
    def open(cls, data_dir: str | Path, bot: str = "bot", *, embedder: Embedder | None = None) -> BotStores:
        """Open (creating on first use) the bot's database; `embedder` defaults to HashingEmbedder()."""
        check_bot_name(bot)
        directory = Path(data_dir)
        path = directory / f"{bot}.sqlite3"
        with ExitStack() as opened:
            sessions = SqliteSessionStore.open(path)
            opened.callback(sessions.close)
            memory = SqliteMemoryStore.open(path)
            opened.callback(memory.close)
            rag = SqliteRagStore.open(path, embedder or HashingEmbedder(), directory / f"{bot}.rag.hnsw")
            opened.pop_all()
        return cls(path, sessions, memory, rag)

    def close(self) -> None:
        """Save the RAG index and close every connection, even if one of them fails."""
        with ExitStack() as closing:
            closing.callback(self.memory.close)
            closing.callback(self.sessions.close)
            closing.callback(self.rag.close)
