"""One bot's PostgreSQL database: a connection pool on a private event loop, and the
decorator that runs a store's coroutines there.

A psycopg async pool belongs to the event loop that opened it, but a bot's stores are
called from many loops (each `asyncio.run` of a script or the CLI, a capture writer's
thread). So the pool lives on one loop of its own, on a background thread; a store call
runs there and the caller's loop only awaits the answer.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from concurrent.futures import Future
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import psycopg
from pgvector.psycopg import register_vector_async
from psycopg_pool import AsyncConnectionPool

from agentloop.adapters.postgres.nearest import EF_SEARCH
from agentloop.adapters.postgres.schema import search_path, vector_schema
from agentloop.adapters.urls import shown_url
from agentloop.adapters.errors import StoreUrlError
from agentloop.errors import StoreError

P = ParamSpec("P")
R = TypeVar("R")

CONNECT_TIMEOUT_S = 5
"""How long opening the stores waits for the server before it says it cannot reach it."""
POOL_MAX_SIZE = 10
"""Connections one bot's stores hold at most, shared by all of its stores."""
_SCHEMA_PREFIX = "agentloop_"
_NO_SERVER = "start PostgreSQL or check the URL's host, port, database, user and password"


def schema_name(url: str, bot: str) -> str:
    """The PostgreSQL schema holding `bot`'s tables; StoreUrlError if the name is too long."""
    name = _SCHEMA_PREFIX + bot
    if len(name.encode()) > 63:
        raise StoreUrlError(
            shown_url(url),
            f"the bot name {bot!r} makes the schema name {name!r}, longer than PostgreSQL's 63 bytes",
            "give the bot a name of at most 53 characters",
        )
    return name


class LoopThread:
    """An event loop running on a daemon thread of its own, for coroutines submitted from anywhere."""

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coroutine: Coroutine[Any, Any, R]) -> Future[R]:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def stop(self) -> None:
        """Stop the loop once the callbacks already scheduled have run, and close it."""
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


class Database:
    """The pool of one bot's stores, on its `LoopThread`, with `schema` first on the search path."""

    def __init__(self, url: str, schema: str) -> None:
        self.url = url
        self.schema = schema
        self.closed = False
        self._thread = LoopThread(f"agentloop-postgres-{schema}")
        self.pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
            url,
            min_size=1,
            max_size=POOL_MAX_SIZE,
            open=False,
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
            configure=self._configure,
            timeout=30.0,
        )

    async def _configure(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Every pooled connection: UTC, the bot's schema then the one holding pgvector, its `vector`
        type, and the HNSW scan's breadth (`EF_SEARCH`)."""
        await conn.execute(search_path(self.schema, await vector_schema(conn)))
        await conn.execute("SET TIME ZONE 'UTC'")
        await conn.execute(f"SET hnsw.ef_search = {int(EF_SEARCH)}")
        await register_vector_async(conn)

    def wait(self, coroutine: Coroutine[Any, Any, R]) -> R:
        """Run `coroutine` on the pool's loop and block until it finishes (for opening and closing)."""
        with self._failures():
            return self._thread.submit(coroutine).result()

    async def run(self, coroutine: Coroutine[Any, Any, R]) -> R:
        """Run `coroutine` on the pool's loop, awaited from the caller's loop."""
        if self.closed:
            coroutine.close()
            raise RuntimeError(
                f"the PostgreSQL stores of {shown_url(self.url)} (schema {self.schema}) are closed; "
                "open them again with open_stores"
            )
        with self._failures():
            return await asyncio.wrap_future(self._thread.submit(coroutine))

    @contextmanager
    def _failures(self) -> Iterator[None]:
        """Turn an error the server reports (a lost connection, a full disk, a table gone) into a StoreError."""
        try:
            yield
        except psycopg.DatabaseError as error:
            raise StoreError(f"the PostgreSQL stores of {shown_url(self.url)} (schema {self.schema})", one_line(error)) from error

    def close(self) -> None:
        """Close the pool (waiting for the calls in flight) and stop its loop; closing twice does nothing."""
        if self.closed:
            return
        self.closed = True
        try:
            self.wait(self.pool.close())
        finally:
            self._thread.stop()


async def connect_once(url: str) -> psycopg.AsyncConnection[Any]:
    """A single autocommit connection to `url`; StoreUrlError, in one line and within
    `CONNECT_TIMEOUT_S`, when the server cannot be reached or refuses the login."""
    try:
        return await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as error:
        raise StoreUrlError(shown_url(url), f"the server cannot be reached ({one_line(error)})", _NO_SERVER) from None


def one_line(error: BaseException) -> str:
    """A driver error's message on one line, any password in a URL in it hidden."""
    return shown_url(" ".join(str(error).split()) or type(error).__name__)


class _OnDatabase(Protocol):
    @property
    def _db(self) -> Database: ...


S = TypeVar("S", bound=_OnDatabase)


def on_database(
    method: Callable[Concatenate[S, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """Make a store's coroutine method run on its database's loop, whichever loop awaits it."""

    async def on_its_loop(store: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await store._db.run(method(store, *args, **kwargs))

    functools.update_wrapper(on_its_loop, method)
    return on_its_loop
