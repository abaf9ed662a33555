"""The SQLite backend: every store of a bot in SQLite files under one directory, one module per
store (its engine and its async port together), with the file's thread, the schema
mechanism and the tenant scopes they share.

`open_stores("sqlite:///DIR")` (or a plain directory path) opens it.
"""

from __future__ import annotations

from contextlib import ExitStack, closing
from pathlib import Path

from agentloop.adapters.sqlite import knowledge as sqlite_knowledge
from agentloop.adapters.sqlite import rag as sqlite_rag
from agentloop.adapters.sqlite import retention as sqlite_retention
from agentloop.adapters.sqlite.audit import AsyncSqliteAuditLog, SqliteAuditLog
from agentloop.adapters.sqlite.approvals import AsyncSqliteApprovalStore, SqliteApprovalStore
from agentloop.adapters.sqlite.attempt_notes import FileAttemptNotes
from agentloop.adapters.sqlite._connection import connect
from agentloop.adapters.sqlite._embedders import reembed_table, stored_embedder
from agentloop.adapters.sqlite.knowledge import AsyncSqliteKnowledgeRepository, SqliteKnowledgeRepository
from agentloop.adapters.sqlite.memory import AsyncSqliteMemoryStore, SqliteMemoryStore
from agentloop.adapters.sqlite.rag import AsyncSqliteRagStore, SqliteRagStore
from agentloop.adapters.sqlite.replies import open_sqlite_replies
from agentloop.adapters.sqlite.schema import migrate
from agentloop.adapters.sqlite.sessions import AsyncSqliteSessionStore, SqliteSessionStore
from agentloop.adapters.sqlite.summaries import AsyncSqliteSummaryStore, SqliteSummaryStore
from agentloop.adapters.sqlite.tasks import AsyncSqliteTaskStore, SqliteTaskStore
from agentloop.adapters.sqlite._thread import SqliteFile
from agentloop.adapters.sqlite.trajectories import AsyncSqliteTrajectoryStore, SqliteTrajectoryStore
from agentloop.adapters.sqlite.usage import AsyncSqliteUsageStore, SqliteUsageStore
from agentloop.ports import Embedder
from agentloop.ports.stores import Stores
from agentloop.retrieval import HybridWeights

__all__ = [
    "FileAttemptNotes",
    "SqliteKnowledgeRepository",
    "SqliteMemoryStore",
    "SqliteRagStore",
    "SqliteSessionStore",
    "SqliteSummaryStore",
    "SqliteTaskStore",
    "SqliteTrajectoryStore",
    "SqliteUsageStore",
    "open_sqlite_replies",
    "open_sqlite_stores",
    "recorded_sqlite_embedders",
    "reembed_sqlite_stores",
]


def open_sqlite_stores(directory: Path, *, bot: str, embedder: Embedder, hybrid: HybridWeights | None = None) -> Stores:
    """Every store of `bot` in `directory` (see `open_stores` for the files); if one fails
    to open, those opened are closed."""
    database = directory / f"{bot}.sqlite3"
    with ExitStack() as opened:
        bot_file = SqliteFile(database)  # history, memory and RAG share it, its connection and its thread
        opened.callback(bot_file.close)
        sessions = AsyncSqliteSessionStore(SqliteSessionStore(bot_file.conn, bot_file.lock), bot_file.thread)
        migrate(bot_file.conn, sqlite_retention.SCHEMA)  # from the first message on, a history's age is known
        memory = AsyncSqliteMemoryStore(SqliteMemoryStore(bot_file.conn, bot_file.lock), bot_file.thread)
        approvals = AsyncSqliteApprovalStore(SqliteApprovalStore(bot_file.conn, bot_file.lock), bot_file.thread)
        summaries = AsyncSqliteSummaryStore(SqliteSummaryStore(bot_file.conn, bot_file.lock), bot_file.thread)
        usage = AsyncSqliteUsageStore(SqliteUsageStore(bot_file.conn, bot_file.lock), bot_file.thread)
        audit = AsyncSqliteAuditLog(SqliteAuditLog(bot_file.conn, bot_file.lock), bot_file.thread)
        rag = AsyncSqliteRagStore(
            SqliteRagStore.on(bot_file.conn, embedder, directory / f"{bot}.rag.hnsw", bot_file.lock, hybrid=hybrid),
            bot_file.thread,
        )
        opened.callback(rag.close)
        knowledge = AsyncSqliteKnowledgeRepository(
            SqliteKnowledgeRepository(directory / f"{bot}.notes.sqlite3", dim=embedder.dim, embedder=embedder.name)
        )
        opened.callback(knowledge.close)
        trajectories = AsyncSqliteTrajectoryStore(SqliteTrajectoryStore(directory / f"{bot}.trajectories.sqlite3"))
        opened.callback(trajectories.close)
        tasks = AsyncSqliteTaskStore(SqliteTaskStore(directory / f"{bot}.tasks.sqlite3"))
        opened.callback(tasks.close)
        opened.pop_all()
    closers = (bot_file.close, rag.close, knowledge.close, trajectories.close, tasks.close)
    return Stores(
        f"sqlite:///{directory}", bot, embedder, sessions, memory, rag, knowledge, trajectories, tasks,
        FileAttemptNotes(directory / f"{bot}.attempt-notes"), approvals, usage, closers, summaries=summaries, audit=audit,
        hybrid=hybrid or HybridWeights(),
    )


def recorded_sqlite_embedders(directory: Path, *, bot: str) -> list[tuple[str, int]]:
    """The (name, dim) of the embedder that made `bot`'s RAG vectors and its notes' vectors
    in `directory`, for those it has stored or recorded (nothing is created or migrated)."""
    found = (
        stored_embedder(directory / f"{bot}.sqlite3", "rag_documents", "vector"),
        stored_embedder(directory / f"{bot}.notes.sqlite3", "knowledge_items", "embedding"),
    )
    return [recorded for recorded in found if recorded is not None]


def reembed_sqlite_stores(directory: Path, *, bot: str, embedder: Embedder, batch_size: int) -> tuple[int, int]:
    """Embed `bot`'s RAG texts and notes in `directory` again with `embedder` and record it
    (see `reembed_stores`); how many texts and notes."""
    database, notes_file = directory / f"{bot}.sqlite3", directory / f"{bot}.notes.sqlite3"
    counts = []
    for path, schema, table, text, vector, index in (
        (database, sqlite_rag.SCHEMA, "rag_documents", "text", "vector", directory / f"{bot}.rag.hnsw"),
        (notes_file, sqlite_knowledge.SCHEMA, "knowledge_items", "markdown", "embedding", Path(f"{notes_file}.hnsw")),
    ):
        with closing(connect(path)) as conn:
            migrate(conn, schema)
            counts.append(reembed_table(conn, table, text, vector, embedder, batch_size))
        index.unlink(missing_ok=True)  # derived from the rows: the next open builds it from the new vectors
    return counts[0], counts[1]
