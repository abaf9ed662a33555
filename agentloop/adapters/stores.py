"""`open_stores(url)`: every store of one bot, opened together from one URL."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType

import attrs

from agentloop._log import get_logger
from agentloop._names import check_bot_name
from agentloop.adapters.embedders.hashing import HashingEmbedder, hashing_name
from agentloop.adapters.embedders.wordllama import DIMENSIONS, WordLlamaEmbedder, wordllama_name
from agentloop.adapters._private_files import private_folder
from agentloop.adapters.sqlite import open_sqlite_replies, open_sqlite_stores, recorded_sqlite_embedders, reembed_sqlite_stores
from agentloop.adapters.urls import after_scheme, has_password_parameter, is_postgres_url, scheme, shown_url
from agentloop.adapters.errors import StoreUrlError
from agentloop.ports import Embedder
from agentloop.ports.replies import Replies
from agentloop.ports.stores import Stores
from agentloop.retrieval import HybridWeights

DEFAULT_STORES_URL = "sqlite:///./agentloop-data"
"""Where a bot keeps its stores unless told: the directory `./agentloop-data`."""

_log = get_logger("agentloop.stores")
_FIX = "give sqlite:///DIR (a relative DIR, or sqlite:////abs/dir), a directory path or postgresql://USER:PASSWORD@HOST/DATABASE"


def open_stores(
    url: str | os.PathLike[str] = DEFAULT_STORES_URL,
    *,
    bot: str = "bot",
    embedder: Embedder | None = None,
    create: bool = True,
    hybrid: HybridWeights | None = None,
) -> Stores:
    """Open (creating on first use) every store of `bot` at `url`.

    `sqlite:///DIR` or a plain directory path: `DIR/<bot>.sqlite3` (history, memory, RAG,
    with `<bot>.rag.hnsw`, and tool calls awaiting approval), `<bot>.notes.sqlite3` (knowledge, with its `.hnsw`),
    `<bot>.trajectories.sqlite3`, `<bot>.tasks.sqlite3` and `<bot>.attempt-notes/`.
    `embedder` embeds RAG texts and notes; without one, stores open with the embedder
    recorded for their vectors when it is a hashing or WordLlama one (an old hashing store
    logs how to move it), else with `default_embedder()`. `hybrid` (default
    `HybridWeights()`) weighs the vector and keyword sides of RAG search, and of note search
    when note-taking is opened on these stores (`Stores.hybrid`). A URL no backend
    can open is a `StoreUrlError`, as is a bot with no stores there yet when `create` is
    false. If a store fails to open, those opened are closed.

    `postgresql://...` (or `postgres://`): the PostgreSQL backend (the `postgres` extra),
    every store in the schema `agentloop_<bot>` of that database.
    """
    check_bot_name(bot)
    shown = shown_url(os.fspath(url))
    if is_postgres_url(url):
        return _open_postgres(os.fspath(url), bot, embedder or (lambda recorded: _embedder_for(recorded, shown, bot)), create, hybrid or HybridWeights())
    directory = _sqlite_directory(url, create)
    if not create and not (directory / f"{bot}.sqlite3").exists():
        raise StoreUrlError(shown, f"the bot {bot!r} has no stores there yet", "run the bot first, or give its URL and name")
    if embedder is None:
        embedder = _embedder_for(recorded_sqlite_embedders(directory, bot=bot), shown, bot)
    return open_sqlite_stores(directory, bot=bot, embedder=embedder, hybrid=hybrid or HybridWeights())


def default_embedder() -> Embedder:
    """The embedder new stores get: WordLlama's, which finds texts by meaning, ships inside its
    package (nothing to download) and costs about as little as hashing words."""
    return WordLlamaEmbedder()


def _embedder_for(recorded: Sequence[tuple[str, int]], shown: str, bot: str) -> Embedder:
    """The embedder recorded for the stores if it can be made here (a hashing one with a
    notice of how to move), else `default_embedder()`: another is refused by the stores."""
    for name, dim in recorded:
        if name == hashing_name(dim):
            _log.warning(
                "stores.hashing_embedder", stores=shown, bot=bot, embedder=name, default=default_embedder().name,
                move=f"agentloop stores reembed {shown} --bot {bot}",
            )
            return HashingEmbedder(dim)
        if name == wordllama_name(dim) and dim in DIMENSIONS:
            return WordLlamaEmbedder(dim)
    return default_embedder()


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
    if is_postgres_url(url):
        postgres = _postgres_backend(os.fspath(url))
        texts, notes = postgres.reembed_postgres_stores(os.fspath(url), bot=bot, embedder=embedder, batch_size=batch_size)
        return Reembedded(texts, notes)
    directory = _sqlite_directory(url, create=False)
    if not (directory / f"{bot}.sqlite3").exists():
        raise StoreUrlError(os.fspath(url), f"the bot {bot!r} has no stores there yet", "run the bot first, or give its URL and name")
    return Reembedded(*reembed_sqlite_stores(directory, bot=bot, embedder=embedder, batch_size=batch_size))


def stores_exist(url: str | os.PathLike[str] = DEFAULT_STORES_URL, *, bot: str = "bot") -> bool:
    """Whether `bot` already has stores at `url`, creating nothing (so a caller that needs a
    new bot can refuse an old one); StoreUrlError when the URL names no backend or no server answers."""
    check_bot_name(bot)
    if is_postgres_url(url):
        found: bool = _postgres_backend(os.fspath(url)).postgres_stores_exist(os.fspath(url), bot=bot)
        return found
    return (_sqlite_directory(url, create=False) / f"{bot}.sqlite3").exists()


@asynccontextmanager
async def open_replies(url: str, *, bot: str) -> AsyncIterator[Replies]:
    """The replies a server sent for `bot`, kept beside its stores at `url` (what `Stores.url`
    gives), open for the block: `<bot>.replies.sqlite3` in a SQLite directory, the table
    `agentloop_serve_replies` in a PostgreSQL database."""
    if is_postgres_url(url):
        async with _postgres_backend(url).open_postgres_replies(url, bot=bot) as kept:
            yield kept
        return
    replies = open_sqlite_replies(_sqlite_directory(url, create=False), bot=bot)
    try:
        yield replies
    finally:
        replies.close()


def _open_postgres(
    url: str, bot: str, embedder: Embedder | Callable[[Sequence[tuple[str, int]]], Embedder], create: bool, hybrid: HybridWeights
) -> Stores:
    stores: Stores = _postgres_backend(url).open_postgres_stores(url, bot=bot, embedder=embedder, create=create, hybrid=hybrid)
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
    start, named = after_scheme(text), scheme(text)
    if start is None and has_password_parameter(text):
        raise StoreUrlError(shown, "it is a key=value connection string, not a directory", _FIX)
    if start is None:
        path = text
    elif named != "sqlite":
        raise StoreUrlError(shown, f"no backend opens {text[:start - 3]!r} URLs", _FIX)
    elif not text[start:].startswith("/") or len(text) == start + 1:
        raise StoreUrlError(shown, "a sqlite URL names a directory after three slashes and no host", _FIX)
    else:
        path = text[start + 1:]
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
