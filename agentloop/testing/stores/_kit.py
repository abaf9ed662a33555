"""What every store suite shares: running a store call, concurrent callers, namesake tenants,
fault injection, and the `open_backend`/`stores` fixtures of a backend."""

from __future__ import annotations

import asyncio
import enum
import inspect
import itertools
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import attrs
import pytest
from hypothesis import given

from agentloop.ports.stores import Stores
from agentloop.errors import StoreUnavailableError
from agentloop.scopes import Scope

T = TypeVar("T")
A = TypeVar("A")
AT = datetime(2026, 1, 1, tzinfo=UTC)
LATER = AT + timedelta(minutes=5)
CHAIN = Scope("acme", "o1", "t1", "p1", "ada", "s1")
"""A full tenant chain; `namesakes(CHAIN)` are the tenants that reuse all its ids but one."""

unique = itertools.count()


def run(call: Coroutine[Any, Any, T]) -> T:
    """Await one store call from a synchronous test."""
    return asyncio.run(call)


def at_once(call: Callable[[A], Awaitable[T]], arguments: Iterable[A], *, threads: int = 4) -> list[T]:
    """`call` on every argument at the same time: spread over `threads` threads that start
    together, each awaiting its share concurrently on its own event loop; the results in order."""
    given = list(arguments)
    shares = [range(first, len(given), threads) for first in range(threads)]
    results: dict[int, T] = {}
    start = threading.Barrier(threads)

    async def share_of(indexes: range) -> list[T]:
        return list(await asyncio.gather(*(call(given[i]) for i in indexes)))

    def worker(indexes: range) -> None:
        start.wait()
        results.update(zip(indexes, asyncio.run(share_of(indexes)), strict=True))

    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(worker, indexes) for indexes in shares]:
            future.result()
    return [results[i] for i in range(len(given))]


def namesakes(scope: Scope, parts: Sequence[str] = ("company_id", "org_id", "team_id", "project_id", "user_id", "session_id")) -> list[Scope]:
    """Other tenants that reuse every id of `scope` but one of `parts`, which is another id
    or missing (I11: none of them may see what `scope` stored)."""
    found: list[Scope] = []
    for part in parts:
        values: list[Any] = [f"other-{part}"] if part == "company_id" else [f"other-{part}", None]  # a chain always has a company
        found += [other for value in values if (other := attrs.evolve(scope, **{part: value})) != scope]
    return found


class Fault(enum.Enum):
    """What `failing_stores` does to one store call."""

    NONE = "none"
    """The call happens and answers."""
    BEFORE = "before"
    """StoreUnavailableError, and the call never happens (the server was down)."""
    AFTER = "after"
    """The call happens, then StoreUnavailableError (the answer was lost with the connection)."""


@attrs.define
class StoreFaults:
    """Which calls of `failing_stores` fail: `decide(call)` says it for each call, named
    "port.method" ("sessions.append"); `failed` lists every call made to fail, in order."""

    decide: Callable[[str], Fault]
    failed: list[tuple[str, Fault]] = attrs.field(factory=list)

    @classmethod
    def in_order(cls, faults: Sequence[Fault]) -> StoreFaults:
        """The n-th call gets `faults[n]`; every call after them happens."""
        remaining = list(faults)
        return cls(lambda call: remaining.pop(0) if remaining else Fault.NONE)

    @classmethod
    def first(cls, call: str, fault: Fault = Fault.BEFORE) -> StoreFaults:
        """The first call named `call` gets `fault`; every other call happens."""
        pending = [fault]
        return cls(lambda made: pending.pop() if made == call and pending else Fault.NONE)


class _FailingStore:
    """One store whose coroutine methods fail as `faults` decides; anything else passes through."""

    def __init__(self, store: object, port: str, faults: StoreFaults) -> None:
        self._store = store
        self._port = port
        self._faults = faults

    def __getattr__(self, method: str) -> Any:
        call = getattr(self._store, method)
        if not inspect.iscoroutinefunction(call):
            return call
        name = f"{self._port}.{method}"

        async def failing(*args: Any, **kwargs: Any) -> Any:
            fault = self._faults.decide(name)
            if fault is Fault.BEFORE:
                self._fail(name, fault)
            result = await call(*args, **kwargs)
            if fault is Fault.AFTER:
                self._fail(name, fault)
            return result

        return failing

    def _fail(self, name: str, fault: Fault) -> None:
        self._faults.failed.append((name, fault))
        raise StoreUnavailableError(f"the {self._port} store", f"{name} was made to fail {fault.value} it ran (failing_stores)")


PORTS = ("sessions", "memory", "rag", "knowledge", "trajectories", "tasks", "attempt_notes", "approvals", "usage")
"""The stores of a `Stores`, by field name."""


def failing_stores(stores: Stores, faults: StoreFaults) -> Stores:
    """`stores` whose calls fail with StoreUnavailableError where `faults` says, before or after
    the call happens (for fault-injection tests); `stores` stays the caller's to close."""
    wrapped: dict[str, Any] = {port: _FailingStore(getattr(stores, port), port, faults) for port in PORTS}
    return attrs.evolve(stores, closers=(), **wrapped)


class Backend:
    """The fixture a backend gives (`open_backend`) and the open stores every test uses."""

    @pytest.fixture
    def open_backend(self) -> Callable[[], Stores]:
        raise NotImplementedError(
            "a backend's test class defines the fixture `open_backend`, returning a function that opens its Stores"
        )

    @pytest.fixture
    def stores(self, open_backend: Callable[[], Stores]) -> Iterator[Stores]:
        stores = open_backend()
        yield stores
        stores.close()
