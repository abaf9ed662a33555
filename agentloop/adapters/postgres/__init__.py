"""The PostgreSQL backend: every store of a bot in one PostgreSQL database, with pgvector.

`open_stores("postgresql://...")` opens it (it needs the `postgres` extra). Each bot's
tables live in a schema of their own, `agentloop_<bot>`, so several bots share a database
and each migrates on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import psycopg

from agentloop.adapters.postgres import (
    approvals, attempt_notes, knowledge, memory, rag, retention, sessions, summaries, tasks, trajectories, usage,
)
from agentloop.adapters.postgres.approvals import PostgresApprovalStore
from agentloop.adapters.postgres.attempt_notes import PostgresAttemptNotes
from agentloop.adapters.postgres._database import CONNECT_TIMEOUT_S, Database, LoopThread, connect_once, one_line, schema_name
from agentloop.adapters.postgres.knowledge import PostgresKnowledgeRepository
from agentloop.adapters.postgres.memory import PostgresMemoryStore
from agentloop.adapters.postgres.rag import PostgresRagStore
from agentloop.adapters.postgres.replies import open_postgres_replies
from agentloop.adapters.postgres.retention import prune_postgres
from agentloop.adapters.postgres._embedders import VECTOR_TABLES, check_embedder, reembed_table, schema_embedders
from agentloop.adapters.postgres.schema import exists, lock_migrations, migrate, search_path, vector_schema
from agentloop.adapters.postgres.sessions import PostgresSessionStore
from agentloop.adapters.postgres.summaries import PostgresSummaryStore
from agentloop.adapters.postgres.tasks import PostgresTaskStore
from agentloop.adapters.postgres.trajectories import PostgresTrajectoryStore
from agentloop.adapters.postgres.usage import PostgresUsageStore
from agentloop.adapters.postgres.audit import SCHEMA as AUDIT_SCHEMA, PostgresAuditLog
from agentloop.adapters.urls import shown_url
from agentloop.ports.stores import Stores
from agentloop.adapters.errors import StoreUrlError
from agentloop.ports import Embedder
from agentloop.retrieval import HybridWeights

SCHEMAS = (
    sessions.SCHEMA, memory.SCHEMA, rag.SCHEMA, knowledge.SCHEMA, trajectories.SCHEMA, tasks.SCHEMA, attempt_notes.SCHEMA,
    approvals.SCHEMA, summaries.SCHEMA, usage.SCHEMA, AUDIT_SCHEMA, retention.SCHEMA,
)

__all__ = [
    "PostgresApprovalStore",
    "PostgresAttemptNotes",
    "PostgresKnowledgeRepository",
    "PostgresMemoryStore",
    "PostgresRagStore",
    "PostgresSessionStore",
    "PostgresSummaryStore",
    "PostgresTaskStore",
    "PostgresTrajectoryStore",
    "PostgresUsageStore",
    "open_postgres_replies",
    "open_postgres_stores",
    "postgres_stores_exist",
    "prune_postgres",
]


EmbedderChoice = Callable[[Sequence[tuple[str, int]]], Embedder]
"""Picks the embedder to open stores with from the (name, dim) pairs recorded for them."""


def open_postgres_stores(
    url: str, *, bot: str, embedder: Embedder | EmbedderChoice, create: bool = True, hybrid: HybridWeights | None = None
) -> Stores:
    """Every store of `bot` in the PostgreSQL database at `url`, migrated to this release's
    schema (made on first use unless `create` is false); see `open_stores`. `embedder` is
    one, or how to choose one from the embedders recorded in the bot's schema."""
    db = Database(url, schema_name(url, bot))
    try:
        embedder = db.wait(_prepare(db, embedder, create, bot))
    except BaseException:
        db.close()
        raise
    return Stores(
        url, bot, embedder, PostgresSessionStore(db), PostgresMemoryStore(db), PostgresRagStore(db, embedder, hybrid=hybrid),
        PostgresKnowledgeRepository(db, embedder.dim), PostgresTrajectoryStore(db), PostgresTaskStore(db),
        PostgresAttemptNotes(db), PostgresApprovalStore(db), PostgresUsageStore(db), (db.close,),
        summaries=PostgresSummaryStore(db), hybrid=hybrid or HybridWeights(), audit=PostgresAuditLog(db),
    )


def postgres_stores_exist(url: str, *, bot: str) -> bool:
    """Whether `bot` has stores in the PostgreSQL database at `url` (see `stores_exist`)."""
    thread = LoopThread("agentloop-postgres-exists")
    try:
        return thread.submit(_exists(url, schema_name(url, bot))).result()
    finally:
        thread.stop()


async def _exists(url: str, schema: str) -> bool:
    async with await connect_once(url) as conn:
        return await exists(conn, schema)


def reembed_postgres_stores(url: str, *, bot: str, embedder: Embedder, batch_size: int) -> tuple[int, int]:
    """Embed `bot`'s RAG texts and notes again with `embedder` and record it (see
    `reembed_stores`); how many texts and notes."""
    db = Database(url, schema_name(url, bot))
    try:
        return db.wait(_reembed(db, embedder, bot, batch_size))
    finally:
        db.close()


async def _reembed(db: Database, embedder: Embedder, bot: str, batch_size: int) -> tuple[int, int]:
    async with await connect_once(db.url) as conn:
        if not await exists(conn, db.schema):
            raise StoreUrlError(shown_url(db.url), f"the bot {bot!r} has no stores there yet", "run the bot first, or give its URL and name")
        await migrate(conn, db.schema, SCHEMAS, dim=embedder.dim, where=f"{shown_url(db.url)} (schema {db.schema})")
    await db.pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
    counts = []
    async with db.pool.connection() as conn, conn.transaction():
        await lock_migrations(conn)
        for table in VECTOR_TABLES:
            counts.append(await reembed_table(conn, table, embedder, batch_size))
    return counts[0], counts[1]


async def _prepare(db: Database, embedder: Embedder | EmbedderChoice, create: bool, bot: str) -> Embedder:
    """Migrate the bot's schema (or refuse), check (or record) the embedder of its vectors, open
    the pool; the embedder (chosen from the recorded ones when `embedder` is a choice)."""
    where = f"{shown_url(db.url)} (schema {db.schema})"
    async with await connect_once(db.url) as conn:
        if not create and not await exists(conn, db.schema):
            raise StoreUrlError(shown_url(db.url), f"the bot {bot!r} has no stores there yet", "run the bot first, or give its URL and name")
        if callable(embedder):  # a choice: embedders are not callable
            embedder = embedder(await schema_embedders(conn, db.schema))
        try:
            await migrate(conn, db.schema, SCHEMAS, dim=embedder.dim, where=where)
        except (psycopg.errors.InsufficientPrivilege, psycopg.errors.FeatureNotSupported, psycopg.errors.UndefinedFile) as error:
            raise StoreUrlError(
                shown_url(db.url), f"the stores cannot be created there ({one_line(error)})",
                "install pgvector on the server and let this user create the extension vector and a schema "
                "(or have an administrator run CREATE EXTENSION vector)",
            ) from None
        async with conn.transaction():
            await lock_migrations(conn)
            await conn.execute(search_path(db.schema, await vector_schema(conn), local=True))
            for table in VECTOR_TABLES:
                await check_embedder(conn, db.schema, table, embedder, where)
    await db.pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
    return embedder
