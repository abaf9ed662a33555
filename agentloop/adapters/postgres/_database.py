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
import select
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from concurrent.futures import Future
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, overload

import psycopg
from pgvector.psycopg import register_vector_async
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from agentloop._log import get_logger
from agentloop.adapters.postgres._nearest import EF_SEARCH
from agentloop.adapters.postgres.schema import search_path, vector_schema
from agentloop.adapters.urls import shown_url
from agentloop.adapters.errors import StoreUrlError
from agentloop.errors import StoreError, StoreUnavailableError

P = ParamSpec("P")
R = TypeVar("R")

CONNECT_TIMEOUT_S = 5
"""How long opening the stores waits for the server before it says it cannot reach it."""
POOL_MAX_SIZE = 10
"""Connections one bot's stores hold at most, shared by all of its stores."""
POOL_WAIT_S = 5.0
"""How long a call waits for a connection before it is `StoreUnavailableError` (the server is out of reach)."""
RECONNECT_WINDOW_S = 2.0
"""How long the pool keeps trying one new connection before giving it up, so the first call after the
server is back connects at once instead of waiting out a long backoff."""
_SCHEMA_PREFIX = "agentloop_"
_NO_SERVER = "start PostgreSQL or check the URL's host, port, database, user and password"
_SERVER_GONE = frozenset({"57P01", "57P02", "57P03"})
"""SQLSTATEs of a server shutting down or starting up (admin shutdown, crash shutdown, cannot connect now)."""

_log = get_logger("agentloop.postgres")


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
    """The pool of one bot's stores, on its `LoopThread`, with `schema` first on the search path.

    The pool checks a connection before lending it, so one the server dropped (a restart)
    is replaced rather than failing the call; a call that still meets a lost connection
    is made once more when it is safe to repeat (`on_database(retry=...)`).
    """

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
            check=check_connection,
            timeout=POOL_WAIT_S,
            reconnect_timeout=RECONNECT_WINDOW_S,
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

    async def run(self, call: Callable[[], Coroutine[Any, Any, R]], *, retry: bool = False) -> R:
        """Run `call()` on the pool's loop, awaited from the caller's loop; with `retry`, once
        more on a fresh connection if the first one was lost (StoreUnavailableError if again)."""
        if self.closed:
            raise RuntimeError(
                f"the PostgreSQL stores of {shown_url(self.url)} (schema {self.schema}) are closed; "
                "open them again with open_stores"
            )
        if retry:
            try:
                return await asyncio.wrap_future(self._thread.submit(call()))
            except psycopg.DatabaseError as error:
                if not lost_connection(error):
                    raise self._failure(error) from error
                _log.warning("postgres.call_retried", schema=self.schema, error=one_line(error))
        with self._failures():
            return await asyncio.wrap_future(self._thread.submit(call()))

    @contextmanager
    def _failures(self) -> Iterator[None]:
        """Turn an error the server reports into a StoreError, or a StoreUnavailableError when the server could not be reached."""
        try:
            yield
        except psycopg.DatabaseError as error:
            raise self._failure(error) from error

    def _failure(self, error: psycopg.DatabaseError) -> StoreError:
        where = f"the PostgreSQL stores of {shown_url(self.url)} (schema {self.schema})"
        if isinstance(error, PoolTimeout) or lost_connection(error):
            return StoreUnavailableError(where, f"the server could not be reached ({one_line(error)})")
        return StoreError(where, one_line(error))

    def close(self) -> None:
        """Close the pool (waiting for the calls in flight) and stop its loop; closing twice does nothing."""
        if self.closed:
            return
        self.closed = True
        try:
            self.wait(self.pool.close())
        finally:
            self._thread.stop()


async def check_connection(conn: psycopg.AsyncConnection[Any]) -> None:
    """The pool's check before lending `conn`: a round trip only when the socket has something
    to read (an idle connection has nothing to read until the server closes it or says why)."""
    if conn.closed:
        raise psycopg.OperationalError("the connection is closed")
    if _readable(conn.fileno()):
        await AsyncConnectionPool.check_connection(conn)


def _readable(fd: int) -> bool:
    """Whether `fd` has data or a hang-up waiting, without blocking (poll takes any fd; select where it is missing)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])


async def connect_once(url: str) -> psycopg.AsyncConnection[Any]:
    """A single autocommit connection to `url`; StoreUrlError, in one line and within
    `CONNECT_TIMEOUT_S`, when the server cannot be reached or refuses the login."""
    try:
        return await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as error:
        raise StoreUrlError(shown_url(url), f"the server cannot be reached ({one_line(error)})", _NO_SERVER) from None


def lost_connection(error: psycopg.DatabaseError) -> bool:
    """Whether `error` is the connection's loss (closed by the server, a network failure, a
    server shutting down), not an answer to the statement: then the statement may not have run."""
    if isinstance(error, PoolTimeout) or not isinstance(error, psycopg.OperationalError):
        return False
    return error.sqlstate is None or error.sqlstate.startswith("08") or error.sqlstate in _SERVER_GONE


def one_line(error: BaseException) -> str:
    """A driver error's message on one line, any password in a URL in it hidden."""
    return shown_url(" ".join(str(error).split()) or type(error).__name__)


class _OnDatabase(Protocol):
    @property
    def _db(self) -> Database: ...


S = TypeVar("S", bound=_OnDatabase)


def keyed(*args: object, key: str | None = None, **kwargs: object) -> bool:
    """`on_database`'s retry test of a write made idempotent by a `key`: safe to repeat with one."""
    return key is not None


Method = Callable[Concatenate[S, P], Coroutine[Any, Any, R]]


@overload
def on_database(method: Method[S, P, R], /) -> Method[S, P, R]: ...


@overload
def on_database(*, retry: bool | Callable[..., bool]) -> Callable[[Method[S, P, R]], Method[S, P, R]]: ...


def on_database(
    method: Method[S, P, R] | None = None, /, *, retry: bool | Callable[..., bool] = False
) -> Method[S, P, R] | Callable[[Method[S, P, R]], Method[S, P, R]]:
    """Make a store's coroutine method run on its database's loop, whichever loop awaits it.

    `retry` says the call is safe to make twice (a read, or a write idempotent by key): true,
    or a test of the call's arguments; such a call that lost its connection is made once more.
    """

    def decorate(method: Method[S, P, R]) -> Method[S, P, R]:
        async def on_its_loop(store: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
            again = retry(*args, **kwargs) if callable(retry) else retry
            return await store._db.run(functools.partial(method, store, *args, **kwargs), retry=again)

        functools.update_wrapper(on_its_loop, method)
        return on_its_loop

    return decorate if method is None else decorate(method)
