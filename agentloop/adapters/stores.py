"""`open_stores(url)`: every store of one bot, opened together from one URL."""

from __future__ import annotations

import os
import re
from contextlib import ExitStack, closing
from pathlib import Path
from types import ModuleType

import attrs

from agentloop.adapters.attempt_notes_files import FileAttemptNotes
from agentloop.adapters.hashing_embedder import HashingEmbedder
from agentloop.adapters.private_files import private_folder
from agentloop.adapters.sqlite import connect
from agentloop.adapters import sqlite_knowledge, sqlite_rag
from agentloop.adapters.sqlite_embedders import reembed_table
from agentloop.adapters.sqlite_schema import migrate
from agentloop.adapters.sqlite_approvals import SqliteApprovalStore
from agentloop.adapters.sqlite_async import (
    AsyncSqliteApprovalStore,
    AsyncSqliteKnowledgeRepository,
    AsyncSqliteMemoryStore,
    AsyncSqliteRagStore,
    AsyncSqliteSessionStore,
    AsyncSqliteTaskStore,
    AsyncSqliteTrajectoryStore,
    SqliteFile,
)
from agentloop.adapters.sqlite_knowledge import SqliteKnowledgeRepository
from agentloop.adapters.sqlite_memory import SqliteMemoryStore
from agentloop.adapters.sqlite_rag import SqliteRagStore
from agentloop.adapters.sqlite_sessions import SqliteSessionStore
from agentloop.adapters.sqlite_tasks import SqliteTaskStore
from agentloop.adapters.sqlite_trajectories import SqliteTrajectoryStore
from agentloop.errors import StoreUrlError
from agentloop.names import check_bot_name
from agentloop.ports import Embedder
from agentloop.ports.stores import Stores

DEFAULT_STORES_URL = "sqlite:///./agentloop-data"
"""Where a bot keeps its stores unless told: the directory `./agentloop-data`."""

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_URL_PASSWORD = re.compile(r"(//[^/:@?#\s]*):[^/?#\s]*@")
"""A URL's `user:password@`, up to the last `@` of the authority (a password may hold an unescaped `@`)."""
_PARAMETER_PASSWORD = re.compile(r"\b((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)", re.IGNORECASE)
"""`password=...` (or `sslpassword=`) in a key=value connection string or a URL's query, quoted or not."""
_FIX = "give sqlite:///DIR (a relative DIR, or sqlite:////abs/dir), a directory path or postgresql://USER:PASSWORD@HOST/DATABASE"
_POSTGRES_SCHEMES = ("postgresql", "postgres")


def shown_url(url: str) -> str:
    """`url` (a URL or a key=value connection string, or a message quoting one) with every password
    replaced by `***`: for messages and logs."""
    return _PARAMETER_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1:***@", url))


def open_stores(
    url: str | os.PathLike[str] = DEFAULT_STORES_URL,
    *,
    bot: str = "bot",
    embedder: Embedder | None = None,
    create: bool = True,
) -> Stores:
    """Open (creating on first use) every store of `bot` at `url`.

    `sqlite:///DIR` or a plain directory path: `DIR/<bot>.sqlite3` (history, memory, RAG,
    with `<bot>.rag.hnsw`, and tool calls awaiting approval), `<bot>.notes.sqlite3` (knowledge, with its `.hnsw`),
    `<bot>.trajectories.sqlite3`, `<bot>.tasks.sqlite3` and `<bot>.attempt-notes/`.
    `embedder` (default `HashingEmbedder()`) embeds RAG texts and notes. A URL no backend
    can open is a `StoreUrlError`, as is a bot with no stores there yet when `create` is
    false. If a store fails to open, those opened are closed.

    `postgresql://...` (or `postgres://`): the PostgreSQL backend (the `postgres` extra),
    every store in the schema `agentloop_<bot>` of that database.
    """
    check_bot_name(bot)
    scheme = _SCHEME.match(os.fspath(url))
    if scheme is not None and scheme.group(1).lower() in _POSTGRES_SCHEMES:
        return _open_postgres(os.fspath(url), bot, embedder or HashingEmbedder(), create)
    directory = _sqlite_directory(url, create)
    if not create and not (directory / f"{bot}.sqlite3").exists():
        raise StoreUrlError(shown_url(os.fspath(url)), f"the bot {bot!r} has no stores there yet", "run the bot first, or give its URL and name")
    embedder = embedder or HashingEmbedder()
    database = directory / f"{bot}.sqlite3"
    with ExitStack() as opened:
        bot_file = SqliteFile(database)  # history, memory and RAG share it, its connection and its thread
        opened.callback(bot_file.close)
        sessions = AsyncSqliteSessionStore(SqliteSessionStore(bot_file.conn, bot_file.lock), bot_file.thread)
        memory = AsyncSqliteMemoryStore(SqliteMemoryStore(bot_file.conn, bot_file.lock), bot_file.thread)
        approvals = AsyncSqliteApprovalStore(SqliteApprovalStore(bot_file.conn, bot_file.lock), bot_file.thread)
        rag = AsyncSqliteRagStore(
            SqliteRagStore.on(bot_file.conn, embedder, directory / f"{bot}.rag.hnsw", bot_file.lock), bot_file.thread
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
        FileAttemptNotes(directory / f"{bot}.attempt-notes"), approvals, closers,
    )


@attrs.frozen
class Reembedded:
    """What `reembed_stores` embedded again: how many RAG texts and how many notes."""

    texts: int
    notes: int


def reembed_stores(
    url: str | os.PathLike[str], *, bot: str = "bot", embedder: Embedder, batch_size: int = 64
) -> Reembedded:
    """Embed every RAG text and note of `bot` at `url` again with `embedder` (in batches of
    `batch_size`) and record it as their embedder, so the stores open with it from now on.

    Texts and notes are unchanged; only their vectors are replaced, each table in one
    transaction. Stop the bot first: a process holding the old vectors would keep using them.
    """
    check_bot_name(bot)
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    scheme = _SCHEME.match(os.fspath(url))
    if scheme is not None and scheme.group(1).lower() in _POSTGRES_SCHEMES:
        postgres = _postgres_backend(os.fspath(url))
        texts, notes = postgres.reembed_postgres_stores(os.fspath(url), bot=bot, embedder=embedder, batch_size=batch_size)
        return Reembedded(texts, notes)
    directory = _sqlite_directory(url, create=False)
    database, notes_file = directory / f"{bot}.sqlite3", directory / f"{bot}.notes.sqlite3"
    if not database.exists():
        raise StoreUrlError(os.fspath(url), f"the bot {bot!r} has no stores there yet", "run the bot first, or give its URL and name")
    counts = []
    for path, schema, table, text, vector, index in (
        (database, sqlite_rag.SCHEMA, "rag_documents", "text", "vector", directory / f"{bot}.rag.hnsw"),
        (notes_file, sqlite_knowledge.SCHEMA, "knowledge_items", "markdown", "embedding", Path(f"{notes_file}.hnsw")),
    ):
        with closing(connect(path)) as conn:
            migrate(conn, schema)
            counts.append(reembed_table(conn, table, text, vector, embedder, batch_size))
        index.unlink(missing_ok=True)  # derived from the rows: the next open builds it from the new vectors
    return Reembedded(*counts)


def stores_exist(url: str | os.PathLike[str] = DEFAULT_STORES_URL, *, bot: str = "bot") -> bool:
    """Whether `bot` already has stores at `url`, creating nothing (so a caller that needs a
    new bot can refuse an old one); StoreUrlError when the URL names no backend or no server answers."""
    check_bot_name(bot)
    scheme = _SCHEME.match(os.fspath(url))
    if scheme is not None and scheme.group(1).lower() in _POSTGRES_SCHEMES:
        found: bool = _postgres_backend(os.fspath(url)).postgres_stores_exist(os.fspath(url), bot=bot)
        return found
    return (_sqlite_directory(url, create=False) / f"{bot}.sqlite3").exists()


def _open_postgres(url: str, bot: str, embedder: Embedder, create: bool) -> Stores:
    stores: Stores = _postgres_backend(url).open_postgres_stores(url, bot=bot, embedder=embedder, create=create)
    return stores


def _postgres_backend(url: str) -> ModuleType:
    """The PostgreSQL backend, imported only now so the base install needs no driver."""
    try:
        from agentloop.adapters import postgres
    except ModuleNotFoundError as missing:
        raise StoreUrlError(
            shown_url(url), f"the PostgreSQL backend needs {missing.name}, which is not installed",
            "pip install 'agentloop-ecs[postgres]'",
        ) from None
    return postgres


def _sqlite_directory(url: str | os.PathLike[str], create: bool) -> Path:
    """The data directory `url` names, created if missing and `create`; StoreUrlError if it cannot be."""
    text = os.fspath(url)
    shown = shown_url(text)
    scheme = _SCHEME.match(text)
    if scheme is None and _PARAMETER_PASSWORD.search(text) is not None:
        raise StoreUrlError(shown, "it is a key=value connection string, not a directory", _FIX)
    if scheme is None:
        path = text
    elif scheme.group(1).lower() != "sqlite":
        raise StoreUrlError(shown, f"no backend opens {scheme.group(1)!r} URLs", _FIX)
    elif not text[scheme.end():].startswith("/") or len(text) == scheme.end() + 1:
        raise StoreUrlError(shown, "a sqlite URL names a directory after three slashes and no host", _FIX)
    else:
        path = text[scheme.end() + 1:]
    if not path:
        raise StoreUrlError(shown, "it names no directory", _FIX)
    directory = Path(path)
    if directory.exists() and not directory.is_dir():
        raise StoreUrlError(shown, f"{directory} is a file, not a directory", "give a directory for the bot's stores")
    if not create:
        return directory
    try:
        private_folder(directory)
    except OSError as error:
        raise StoreUrlError(shown, f"the directory cannot be created ({error.strerror or error})", "give a directory you can write to") from error
    return directory
