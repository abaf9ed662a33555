"""The PostgreSQL backend: every store of a bot in one PostgreSQL database, with pgvector.

`open_stores("postgresql://...")` opens it (it needs the `postgres` extra). Each bot's
tables live in a schema of their own, `agentloop_<bot>`, so several bots share a database
and each migrates on its own.
"""

from __future__ import annotations

import psycopg

from agentloop.adapters.postgres import attempt_notes, knowledge, memory, rag, sessions, tasks, trajectories
from agentloop.adapters.postgres.attempt_notes import PostgresAttemptNotes
from agentloop.adapters.postgres.database import CONNECT_TIMEOUT_S, Database, connect_once, one_line, schema_name
from agentloop.adapters.postgres.knowledge import PostgresKnowledgeRepository
from agentloop.adapters.postgres.memory import PostgresMemoryStore
from agentloop.adapters.postgres.rag import PostgresRagStore
from agentloop.adapters.postgres.schema import dimension, exists, migrate
from agentloop.adapters.postgres.sessions import PostgresSessionStore
from agentloop.adapters.postgres.tasks import PostgresTaskStore
from agentloop.adapters.postgres.trajectories import PostgresTrajectoryStore
from agentloop.adapters.stores import shown_url
from agentloop.ports.stores import Stores
from agentloop.errors import StoreUrlError
from agentloop.ports import Embedder

SCHEMAS = (
    sessions.SCHEMA, memory.SCHEMA, rag.SCHEMA, knowledge.SCHEMA, trajectories.SCHEMA, tasks.SCHEMA, attempt_notes.SCHEMA,
)
_VECTOR_COLUMNS = (("rag_documents", "vector"), ("knowledge_items", "embedding"))

__all__ = [
    "PostgresAttemptNotes",
    "PostgresKnowledgeRepository",
    "PostgresMemoryStore",
    "PostgresRagStore",
    "PostgresSessionStore",
    "PostgresTaskStore",
    "PostgresTrajectoryStore",
    "open_postgres_stores",
]


def open_postgres_stores(url: str, *, bot: str, embedder: Embedder, create: bool = True) -> Stores:
    """Every store of `bot` in the PostgreSQL database at `url`, migrated to this release's
    schema (made on first use unless `create` is false); see `open_stores`."""
    db = Database(url, schema_name(url, bot))
    try:
        db.wait(_prepare(db, embedder.dim, create, bot))
    except BaseException:
        db.close()
        raise
    return Stores(
        url, bot, embedder, PostgresSessionStore(db), PostgresMemoryStore(db), PostgresRagStore(db, embedder),
        PostgresKnowledgeRepository(db, embedder.dim), PostgresTrajectoryStore(db), PostgresTaskStore(db),
        PostgresAttemptNotes(db), (db.close,),
    )


async def _prepare(db: Database, dim: int, create: bool, bot: str) -> None:
    """Migrate the bot's schema (or refuse), check the vectors' dimension, open the pool."""
    where = f"{shown_url(db.url)} (schema {db.schema})"
    async with await connect_once(db.url) as conn:
        if not create and not await exists(conn, db.schema):
            raise StoreUrlError(shown_url(db.url), f"the bot {bot!r} has no stores there yet", "run the bot first, or give its URL and name")
        try:
            await migrate(conn, db.schema, SCHEMAS, dim=dim, where=where)
        except (psycopg.errors.InsufficientPrivilege, psycopg.errors.FeatureNotSupported, psycopg.errors.UndefinedFile) as error:
            raise StoreUrlError(
                shown_url(db.url), f"the stores cannot be created there ({one_line(error)})",
                "install pgvector on the server and let this user create the extension vector and a schema "
                "(or have an administrator run CREATE EXTENSION vector)",
            ) from None
        for table, column in _VECTOR_COLUMNS:
            found = await dimension(conn, db.schema, table, column)
            if found != dim:
                raise ValueError(
                    f"{where} holds vectors of dim {found} in {table} but the embedder makes dim {dim}; use the "
                    "embedder the texts were indexed with, or another bot name or database"
                )
    await db.pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
