"""The store conformance suite: test classes a storage backend subclasses, giving one fixture.

A backend proves it keeps the contract of every storage port (as the ports' docstrings
state it: order, limits, tenant isolation, compare-and-set, dedup, counters, leases,
reopening, concurrent writers) by passing these tests; its own tests then only cover
what is particular to it (files, indexes, migrations).

    import pytest
    from agentloop.adapters import open_stores
    from agentloop.testing.stores import StoresTests

    class TestMyStores(StoresTests):
        @pytest.fixture
        def open_backend(self, tmp_path):
            return lambda embedder=None: open_stores(tmp_path, embedder=embedder)

The fixture contract: `open_backend` returns a function that opens the backend's
`Stores` at one place, empty before the first call. Calling it again after the stores
it returned were closed must open the same data again (that is how reopening is tested).
It takes an optional `embedder` and opens the stores with it instead of the usual one
(that is how refusing a store's wrong embedder is tested).
The stores must embed with `HashingEmbedder` (the default, any dim): the retrieval tests
rely on texts sharing words being similar, and on a text with no words embedding to
nothing. Each test closes the stores it opens.

Each port has its own class (`SessionStoreTests`, `MemoryStoreTests`, `RagStoreTests`,
`KnowledgeRepositoryTests`, `TrajectoryStoreTests`, `TaskStoreTests`,
`AttemptNotesStoreTests`, `ApprovalStoreTests`) for a backend of
some ports only; `StoresTests` inherits them all, and `TurnStorageTests`, which runs the
standard pipeline's turns over the backend's stores made to fail at random points by
`failing_stores` (invariant I15). The tests are plain synchronous tests
that run each store call with `asyncio.run` (no async plugin needed); the concurrency
tests call from several threads at once, each with its own event loop.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import itertools
import json
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import attrs
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop.approvals import ApprovalRequest, PendingApproval
from agentloop.context import IncomingMessage, Session
from agentloop.ports.stores import Stores
from agentloop.adapters.errors import EmbedderMismatchError
from agentloop.errors import StoreUnavailableError
from agentloop.notes.errors import UnknownNoteError
from agentloop.messages import ChatMessage, ToolCall
from agentloop.notes.models import KnowledgeItem, Layer, LayerIds, MergeSuggestion, NoteMetadata, NoteStatus, NoteType
from agentloop.ports import (
    ApprovalStore,
    AttemptNotesStore,
    Embedder,
    KnowledgeRepository,
    MemoryStore,
    RagStore,
    SessionStore,
    TaskStore,
    TrajectoryStore,
)
from agentloop.ports.stores import MemoryEntry
from agentloop.ports.tasks import TaskRecord, TaskState
from agentloop.ports.vectors import Vectors
from agentloop.outcome import FinishReason
from agentloop.scopes import Scope, history_scope
from agentloop.adapters.channels.recording import RecordingChannel
from agentloop.adapters.llm.scripted import ScriptedLLM
from agentloop.testing.notes import make_execution, make_executions

__all__ = [
    "ApprovalStoreTests",
    "AttemptNotesStoreTests",
    "Fault",
    "KnowledgeRepositoryTests",
    "MemoryStoreTests",
    "RagStoreTests",
    "SessionStoreTests",
    "StoreFaults",
    "StoresTests",
    "TaskStoreTests",
    "TrajectoryStoreTests",
    "TurnStorageTests",
    "at_once",
    "failing_stores",
    "namesakes",
    "run",
]

T = TypeVar("T")
A = TypeVar("A")
AT = datetime(2026, 1, 1, tzinfo=UTC)
LATER = AT + timedelta(minutes=5)
CHAIN = Scope("acme", "o1", "t1", "p1", "ada", "s1")
"""A full tenant chain; `namesakes(CHAIN)` are the tenants that reuse all its ids but one."""

_unique = itertools.count()


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


PORTS = ("sessions", "memory", "rag", "knowledge", "trajectories", "tasks", "attempt_notes", "approvals")
"""The stores of a `Stores`, by field name."""


def failing_stores(stores: Stores, faults: StoreFaults) -> Stores:
    """`stores` whose calls fail with StoreUnavailableError where `faults` says, before or after
    the call happens (for fault-injection tests); `stores` stays the caller's to close."""
    wrapped: dict[str, Any] = {port: _FailingStore(getattr(stores, port), port, faults) for port in PORTS}
    return attrs.evolve(stores, closers=(), **wrapped)


class _Backend:
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


class SessionStoreTests(_Backend):
    """`SessionStore`: each history scope's messages, oldest first, as appended."""

    def test_a_history_never_written_is_empty(self, stores: Stores) -> None:
        assert run(stores.sessions.recent(CHAIN, 10)) == ()

    def test_recent_is_the_newest_messages_oldest_first(self, stores: Stores) -> None:
        other = attrs.evolve(CHAIN, session_id="s2")
        messages = [ChatMessage.user(f"q{i}") if i % 2 == 0 else ChatMessage.assistant(f"a{i}") for i in range(6)]
        run(stores.sessions.append(CHAIN, messages[:3]))
        run(stores.sessions.append(other, [ChatMessage.user("other")]))
        run(stores.sessions.append(CHAIN, messages[3:]))
        run(stores.sessions.append(CHAIN, []))
        assert run(stores.sessions.recent(CHAIN, 4)) == tuple(messages[2:])
        assert run(stores.sessions.recent(CHAIN, 100)) == tuple(messages)
        assert run(stores.sessions.recent(CHAIN, 0)) == ()
        assert run(stores.sessions.recent(other, 10)) == (ChatMessage.user("other"),)

    def test_tool_calls_and_results_come_back_after_a_reopen(
        self, stores: Stores, open_backend: Callable[[], Stores]
    ) -> None:
        call = ToolCall("c1", "search", {"q": "x", "n": [1, 2], "deep": {"a": None}})
        messages = [
            ChatMessage.user("find x"),
            ChatMessage.assistant(None, (call,)),
            ChatMessage.tool("c1", "search", "found"),
            ChatMessage.assistant("x is here"),
        ]
        run(stores.sessions.append(CHAIN, messages))
        stores.close()
        with open_backend() as again:
            assert run(again.sessions.recent(CHAIN, 10)) == tuple(messages)

    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors])
    @given(st.lists(st.tuples(st.sampled_from("ab"), st.text(max_size=12)), max_size=12), st.integers(0, 14))
    def test_recent_is_the_tail_of_what_was_appended(
        self, stores: Stores, appended: list[tuple[str, str]], limit: int
    ) -> None:
        """I5: history keeps each session's messages in the order appended, so the canonical
        answer stored last is the one read back. Each example writes sessions of its own (the
        store is shared by the examples, and by every backend's class that inherits this test)."""
        run_id = next(_unique)
        for session, text in appended:
            run(stores.sessions.append(Scope(session_id=f"{session}{run_id}"), [ChatMessage.user(text)]))
        for session in "ab":
            mine = [ChatMessage.user(text) for s, text in appended if s == session]
            expected = tuple(mine[-limit:]) if limit else ()
            assert run(stores.sessions.recent(Scope(session_id=f"{session}{run_id}"), limit)) == expected

    def test_no_namesake_in_another_chain_sees_the_history(self, stores: Stores) -> None:
        """I11: the same session id (and every other id) under another chain is another history."""
        run(stores.sessions.append(CHAIN, [ChatMessage.user("ada's secret")]))
        for other in namesakes(CHAIN):
            run(stores.sessions.append(other, [ChatMessage.user(f"of {other.key}")]))
        assert run(stores.sessions.recent(CHAIN, 10)) == (ChatMessage.user("ada's secret"),)
        for other in namesakes(CHAIN):
            assert run(stores.sessions.recent(other, 10)) == (ChatMessage.user(f"of {other.key}"),)

    def test_concurrent_appends_lose_nothing_and_keep_each_batch_whole(self, stores: Stores) -> None:
        batches = [[ChatMessage.user(f"b{b}m{m}") for m in range(3)] for b in range(16)]
        at_once(lambda batch: stores.sessions.append(CHAIN, batch), batches)
        stored = [m.content for m in run(stores.sessions.recent(CHAIN, 100))]
        runs = sorted(tuple(stored[i : i + 3]) for i in range(0, len(stored), 3))
        assert runs == sorted(tuple(m.content for m in batch) for batch in batches)

    def test_a_keyed_append_is_applied_once_per_history_scope(
        self, stores: Stores, open_backend: Callable[[], Stores]
    ) -> None:
        """I13: a turn run again with the same message id writes its history once, and the
        same id in another chain is another message."""
        turn = [ChatMessage.user("hi"), ChatMessage.assistant("hello")]
        other = attrs.evolve(CHAIN, org_id="other")
        assert run(stores.sessions.append(CHAIN, turn, key="m1")) is True
        assert run(stores.sessions.append(CHAIN, turn, key="m1")) is False
        assert run(stores.sessions.append(other, turn, key="m1")) is True
        assert run(stores.sessions.append(CHAIN, [ChatMessage.user("again")], key="m2")) is True
        assert run(stores.sessions.append(CHAIN, [ChatMessage.user("unkeyed")])) is True
        assert run(stores.sessions.append(CHAIN, [ChatMessage.user("unkeyed")])) is True
        stores.close()
        with open_backend() as again:
            assert run(again.sessions.append(CHAIN, turn, key="m1")) is False  # keys outlive the process
            assert [m.content for m in run(again.sessions.recent(CHAIN, 10))] == ["hi", "hello", "again", "unkeyed", "unkeyed"]
            assert [m.content for m in run(again.sessions.recent(other, 10))] == ["hi", "hello"]

    def test_of_writers_appending_one_key_at_once_exactly_one_applies_it(self, stores: Stores) -> None:
        """I13: two workers finishing the same message's turn at once write its history once."""
        turn = [ChatMessage.user("hi"), ChatMessage.assistant("hello")]
        applied = at_once(lambda key: stores.sessions.append(CHAIN, turn, key=key), ["m1"] * 8)
        assert applied.count(True) == 1 and run(stores.sessions.recent(CHAIN, 10)) == tuple(turn)


class MemoryStoreTests(_Backend):
    """`MemoryStore`: a scope's remembered exchanges, newest window oldest first."""

    @staticmethod
    def entry(scope: Scope, session: str, n: int) -> MemoryEntry:
        return MemoryEntry(scope, session, f"q{n}", f"a{n}", AT + timedelta(minutes=n))

    def test_recent_entries_of_a_scope_oldest_first_optionally_without_one_session(self, stores: Stores) -> None:
        ada, bob = Scope(user_id="ada"), Scope(user_id="bob")
        for n in range(5):
            run(stores.memory.add(self.entry(ada, "s1" if n < 3 else "s2", n)))
        run(stores.memory.add(self.entry(bob, "s9", 9)))
        assert [e.assistant_text for e in run(stores.memory.recent(ada, 3))] == ["a2", "a3", "a4"]
        assert [e.assistant_text for e in run(stores.memory.recent(ada, 10, exclude_session="s2"))] == ["a0", "a1", "a2"]
        assert [e.assistant_text for e in run(stores.memory.recent(ada, 2, exclude_session="s2"))] == ["a1", "a2"], (
            "the limit counts the entries left after the exclusion"
        )
        assert run(stores.memory.recent(ada, 1)) == (self.entry(ada, "s2", 4),)
        assert run(stores.memory.recent(ada, 0)) == ()
        assert run(stores.memory.recent(bob, 10)) == (self.entry(bob, "s9", 9),)
        assert run(stores.memory.recent(Scope(user_id="nobody"), 5)) == ()

    def test_no_namesake_in_another_chain_sees_the_memory(self, stores: Stores) -> None:
        """I11: the same user id in another company, org, team or project remembers nothing of ours."""
        run(stores.memory.add(self.entry(CHAIN, "s1", 1)))
        for other in namesakes(CHAIN):
            assert run(stores.memory.recent(other, 10)) == ()
        assert run(stores.memory.recent(CHAIN, 10)) == (self.entry(CHAIN, "s1", 1),)

    def test_entries_survive_a_reopen(self, stores: Stores, open_backend: Callable[[], Stores]) -> None:
        run(stores.memory.add(self.entry(CHAIN, "s1", 1)))
        stores.close()
        with open_backend() as again:
            assert run(again.memory.recent(CHAIN, 5)) == (self.entry(CHAIN, "s1", 1),)

    def test_concurrent_adds_lose_nothing(self, stores: Stores) -> None:
        entries = [self.entry(CHAIN, f"s{n % 3}", n) for n in range(24)]
        at_once(stores.memory.add, entries)
        assert sorted(run(stores.memory.recent(CHAIN, 100)), key=lambda e: e.created_at) == entries


class RagStoreTests(_Backend):
    """`RagStore`: texts found by meaning within their scope; a text is stored once per scope."""

    A, B = Scope(project_id="a"), Scope(project_id="b")

    def fill(self, stores: Stores) -> None:
        for scope, text in (
            (self.A, "The deployment runs every night at two"),
            (self.A, "Invoices are sent on the first of the month"),
            (self.B, "The deployment of project b is manual"),
            (self.A, "Lunch is served at noon in the canteen"),
        ):
            run(stores.rag.add(scope, text, session_id="s1"))

    def test_search_finds_the_most_similar_texts_of_the_scope_best_first(self, stores: Stores) -> None:
        self.fill(stores)
        hits = run(stores.rag.search(self.A, "when does the deployment run", 2))
        assert len(hits) == 2 and hits[0].text == "The deployment runs every night at two"
        assert all(hit.scope == self.A for hit in hits) and hits[0].score >= hits[1].score
        (same,) = run(stores.rag.search(self.A, "The deployment runs every night at two", 1))
        assert same.text == "The deployment runs every night at two" and same.score == pytest.approx(1.0, abs=1e-3), (
            "a hit's score is its cosine similarity"
        )
        assert len(run(stores.rag.search(self.A, "deployment", 1))) == 1
        assert [h.text for h in run(stores.rag.search(self.B, "deployment", 5))] == ["The deployment of project b is manual"]
        assert run(stores.rag.search(Scope(project_id="c"), "deployment", 5)) == []
        assert run(stores.rag.search(self.A, "deployment", 0)) == []
        assert run(stores.rag.search(self.A, "!!!", 5)) == []  # no words: nothing is similar
        assert run(stores.rag.count()) == 4

    def test_texts_lists_a_scopes_texts_oldest_first(self, stores: Stores) -> None:
        self.fill(stores)
        assert run(stores.rag.texts(self.A)) == [
            "The deployment runs every night at two", "Invoices are sent on the first of the month",
            "Lunch is served at noon in the canteen",
        ]
        assert run(stores.rag.texts(self.B)) == ["The deployment of project b is manual"]
        assert run(stores.rag.texts(Scope(project_id="c"))) == []

    def test_a_text_already_in_its_scope_is_not_stored_twice(self, stores: Stores) -> None:
        first = run(stores.rag.add(Scope(user_id="a"), "I don't know."))
        assert run(stores.rag.add(Scope(user_id="a"), "I don't know.")) == first
        assert run(stores.rag.add(Scope(user_id="b"), "I don't know.")) != first
        assert run(stores.rag.count()) == 2
        assert [h.id for h in run(stores.rag.search(Scope(user_id="a"), "know", 5))] == [first]
        assert run(stores.rag.texts(Scope(user_id="a"))) == ["I don't know."]

    def test_no_namesake_in_another_chain_finds_the_text(self, stores: Stores) -> None:
        """I11: an answer indexed for one chain is never found from another that reuses its ids."""
        mine = run(stores.rag.add(CHAIN, "The shop opens at nine"))
        for other in namesakes(CHAIN):
            assert run(stores.rag.search(other, "when does the shop open", 5)) == []
            assert run(stores.rag.texts(other)) == []
        assert [h.id for h in run(stores.rag.search(CHAIN, "when does the shop open", 5))] == [mine]

    def test_texts_and_their_results_survive_a_reopen(self, stores: Stores, open_backend: Callable[[], Stores]) -> None:
        self.fill(stores)
        queries = ["deployment at night", "invoices", "canteen lunch"]
        before = [run(stores.rag.search(self.A, query, 3)) for query in queries]
        stores.close()
        with open_backend() as again:
            assert [run(again.rag.search(self.A, query, 3)) for query in queries] == before
            assert run(again.rag.count()) == 4

    def test_concurrent_adds_lose_nothing_and_store_a_repeated_text_once(self, stores: Stores) -> None:
        texts = [f"note number {n} about topic{n}" for n in range(16)]
        ids = at_once(lambda text: stores.rag.add(CHAIN, text), texts)
        assert len(set(ids)) == len(texts) and run(stores.rag.count()) == len(texts)
        same = at_once(lambda text: stores.rag.add(CHAIN, text), ["one answer given by many"] * 8)
        assert len(set(same)) == 1 and run(stores.rag.count()) == len(texts) + 1
        found = run(stores.rag.search(CHAIN, "note number 7 about topic7", 1))
        assert [(h.id, h.text) for h in found] == [(ids[7], texts[7])]


@attrs.frozen
class _Renamed:
    """`embedder` under another name: the vectors of one model passed off as another's."""

    embedder: Embedder
    name: str

    @property
    def dim(self) -> int:
        return self.embedder.dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        return self.embedder.embed(texts)

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        return await self.embedder.aembed(texts)


def unit_vector(seed: int, dim: int) -> Vectors:
    """A reproducible random unit vector: notes with distinct seeds are barely similar."""
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


OWNER = LayerIds("acme", "o1", "t1", "p1")


class KnowledgeRepositoryTests(_Backend):
    """`KnowledgeRepository`: notes, visibility by chain and layer, counters and compare-and-set."""

    @staticmethod
    def note(stores: Stores, seed: int, layer: Layer = Layer.PROJECT, owner: LayerIds = OWNER) -> KnowledgeItem:
        metadata = NoteMetadata("hash", AT, "m-1", "s1", "u1", owner.project_id, ("a", "b"))
        return KnowledgeItem(
            NoteType.PATTERN, layer, owner.truncated(layer), f"note {seed}", f"# note {seed}\n",
            unit_vector(seed, stores.embedder.dim), AT, metadata,
        )

    def add(self, stores: Stores, seed: int, layer: Layer = Layer.PROJECT, owner: LayerIds = OWNER) -> KnowledgeItem:
        return run(stores.knowledge.add(self.note(stores, seed, layer, owner)))

    def test_an_added_note_comes_back_whole_with_its_id(self, stores: Stores) -> None:
        note = self.note(stores, 1)
        stored = run(stores.knowledge.add(note))
        assert stored.id is not None and attrs.evolve(stored, id=None) == note
        again = run(stores.knowledge.get(stored.key))
        assert again == stored and np.array_equal(again.embedding, note.embedding)
        with pytest.raises(ValueError, match="already stored"):
            run(stores.knowledge.add(stored))
        with pytest.raises(ValueError):
            run(stores.knowledge.add(attrs.evolve(note, embedding=np.ones(stores.embedder.dim + 1))))
        assert run(stores.knowledge.count()) == 1

    def test_add_many_returns_the_ids_in_order(self, stores: Stores) -> None:
        notes = [self.note(stores, seed) for seed in range(3)]
        ids = run(stores.knowledge.add_many(notes))
        assert [run(stores.knowledge.get(i)).title for i in ids] == ["note 0", "note 1", "note 2"]
        assert len(set(ids)) == 3 and run(stores.knowledge.add_many([])) == []
        assert run(stores.knowledge.count()) == 3

    def test_an_id_never_stored_is_an_unknown_note_for_every_call(self, stores: Stores) -> None:
        unknown = self.add(stores, 1).key + 4242
        calls: list[Callable[[], Coroutine[Any, Any, object]]] = [
            lambda: stores.knowledge.get(unknown),
            lambda: stores.knowledge.retrievals(unknown),
            lambda: stores.knowledge.record_retrievals([unknown], "q", None, AT),
            lambda: stores.knowledge.add_reference(unknown, AT),
            lambda: stores.knowledge.set_flag(unknown, True, AT),
            lambda: stores.knowledge.set_status(unknown, NoteStatus.DRAFT, NoteStatus.PROPOSED, AT),
        ]
        for call in calls:
            with pytest.raises(UnknownNoteError, match=f"no knowledge item with id {unknown}"):
                run(call())

    def test_items_lists_every_note_or_those_of_some_statuses_in_id_order(self, stores: Stores) -> None:
        assert run(stores.knowledge.items()) == []
        stored = [self.add(stores, seed) for seed in range(3)]
        run(stores.knowledge.set_status(stored[1].key, NoteStatus.DRAFT, NoteStatus.PROPOSED, AT))
        run(stores.knowledge.set_status(stored[2].key, NoteStatus.DRAFT, NoteStatus.REJECTED, AT))
        assert [i.key for i in run(stores.knowledge.items())] == [s.key for s in stored]
        both = run(stores.knowledge.items({NoteStatus.PROPOSED, NoteStatus.REJECTED}))
        assert [i.key for i in both] == [stored[1].key, stored[2].key]
        assert run(stores.knowledge.items(())) == []

    def test_search_returns_the_k_most_similar_above_the_threshold_best_first(self, stores: Stores) -> None:
        stored = [self.add(stores, seed) for seed in range(6)]
        statuses = {NoteStatus.DRAFT}
        query = unit_vector(3, stores.embedder.dim)
        hits = run(stores.knowledge.search(query, 4, caller=OWNER, layer=Layer.PROJECT, statuses=statuses, min_similarity=-1.0))
        assert len(hits) == 4 and hits[0][0].key == stored[3].key and hits[0][1] == pytest.approx(1.0, abs=1e-5)
        similarities = [similarity for _, similarity in hits]
        assert similarities == sorted(similarities, reverse=True)
        everything = run(stores.knowledge.search(query, 10, caller=OWNER, layer=Layer.PROJECT, statuses=statuses, min_similarity=-1.0))
        assert len(everything) == 6
        close = run(stores.knowledge.search(query, 10, caller=OWNER, layer=Layer.PROJECT, statuses=statuses, min_similarity=0.9))
        assert [i.key for i, _ in close] == [stored[3].key]
        assert run(stores.knowledge.search(query, 0, caller=OWNER, layer=Layer.PROJECT, statuses=statuses)) == []
        assert run(stores.knowledge.search(query, 5, caller=OWNER, layer=Layer.PROJECT, statuses=())) == []

    def test_search_sees_only_the_statuses_asked_for_as_they_are_now(self, stores: Stores) -> None:
        draft, moved = self.add(stores, 1), self.add(stores, 2)
        run(stores.knowledge.set_status(moved.key, NoteStatus.DRAFT, NoteStatus.REJECTED, AT))
        dim = stores.embedder.dim

        def found(statuses: set[NoteStatus]) -> set[int]:
            hits = run(stores.knowledge.search(unit_vector(2, dim), 5, caller=OWNER, layer=Layer.PROJECT,
                                               statuses=statuses, min_similarity=-1.0))
            return {item.key for item, _ in hits}

        assert found({NoteStatus.DRAFT}) == {draft.key}
        assert found({NoteStatus.REJECTED}) == {moved.key}
        assert found({NoteStatus.DRAFT, NoteStatus.REJECTED}) == {draft.key, moved.key}

    def test_a_caller_sees_its_chain_at_the_layer_asked_and_above_and_no_other_chain(self, stores: Stores) -> None:
        """I11: a note is visible exactly to the chains `LayerIds.visible_owners` names, so a
        namesake chain sees only the parents it really shares."""
        mine = {layer: self.add(stores, 1, layer).key for layer in Layer}
        namesake_owners = [
            LayerIds("other", "o1", "t1", "p1"), LayerIds("acme", "o2", "t1", "p1"),
            LayerIds("acme", "o1", "t2", "p1"), LayerIds("acme", "o1", "t1", "p2"),
        ]
        theirs = {owner: self.add(stores, 1, Layer.PROJECT, owner).key for owner in namesake_owners}
        dim = stores.embedder.dim

        def seen(caller: LayerIds, layer: Layer) -> set[int]:
            hits = run(stores.knowledge.search(unit_vector(1, dim), 20, caller=caller, layer=layer,
                                               statuses={NoteStatus.DRAFT}, min_similarity=-1.0))
            return {item.key for item, _ in hits}

        assert seen(OWNER, Layer.PROJECT) == set(mine.values())
        assert seen(OWNER, Layer.TEAM) == {mine[Layer.COMPANY], mine[Layer.ORG], mine[Layer.TEAM]}
        assert seen(namesake_owners[0], Layer.PROJECT) == {theirs[namesake_owners[0]]}
        assert seen(namesake_owners[1], Layer.PROJECT) == {mine[Layer.COMPANY], theirs[namesake_owners[1]]}
        assert seen(namesake_owners[2], Layer.PROJECT) == {mine[Layer.COMPANY], mine[Layer.ORG], theirs[namesake_owners[2]]}
        assert seen(namesake_owners[3], Layer.PROJECT) == {
            mine[Layer.COMPANY], mine[Layer.ORG], mine[Layer.TEAM], theirs[namesake_owners[3]]
        }

    def test_retrievals_are_counted_and_logged_with_the_sessions_chain(self, stores: Stores) -> None:
        a, b = self.add(stores, 1), self.add(stores, 2)
        counted = run(stores.knowledge.record_retrievals([a.key, b.key], "first", CHAIN, AT))
        assert [(i.key, i.retrieval_count) for i in counted] == [(a.key, 1), (b.key, 1)]
        run(stores.knowledge.record_retrievals([a.key], "second", None, LATER))
        assert run(stores.knowledge.record_retrievals([], "nothing", CHAIN, AT)) == []
        assert run(stores.knowledge.get(a.key)).retrieval_count == 2
        logged = run(stores.knowledge.retrievals(a.key))
        assert [(r.note_id, r.query, r.session_id, r.at, r.session) for r in logged] == [
            (a.key, "first", "s1", AT, CHAIN), (a.key, "second", None, LATER, None),
        ]
        assert run(stores.knowledge.retrievals(self.add(stores, 3).key)) == []

    def test_a_session_credits_each_note_it_was_shown_once(self, stores: Stores) -> None:
        a, b = self.add(stores, 1), self.add(stores, 2)
        session = Scope(session_id="s1")
        run(stores.knowledge.record_retrievals([a.key, b.key], "q", session, AT))
        run(stores.knowledge.record_retrievals([a.key], "q2", session, AT))
        assert [(i.key, i.usefulness_score) for i in run(stores.knowledge.credit_session(session, AT))] == [
            (a.key, 1), (b.key, 1),
        ]
        assert run(stores.knowledge.credit_session(session, AT)) == []
        assert run(stores.knowledge.credit_session(Scope(session_id="never-seen"), AT)) == []
        assert run(stores.knowledge.get(a.key)).usefulness_score == 1

    def test_feedback_on_a_turn_credits_what_that_turn_was_shown_once_per_session(self, stores: Stores) -> None:
        a, b, c = self.add(stores, 1), self.add(stores, 2), self.add(stores, 3)
        session = Scope(session_id="s1")
        run(stores.knowledge.record_retrievals([a.key], "q1", session, AT, "turn-1"))
        run(stores.knowledge.record_retrievals([a.key, b.key], "q2", session, LATER, "turn-2"))
        run(stores.knowledge.record_retrievals([c.key], "q3", session, LATER))
        assert [r.turn_id for r in run(stores.knowledge.retrievals(a.key))] == ["turn-1", "turn-2"]
        assert run(stores.knowledge.credit_session(session, AT, "turn-unknown")) == []
        assert run(stores.knowledge.credit_session(Scope(session_id="s2"), AT, "turn-1")) == []
        assert [(i.key, i.usefulness_score) for i in run(stores.knowledge.credit_session(session, AT, "turn-1"))] == [
            (a.key, 1),
        ]
        assert [i.key for i in run(stores.knowledge.credit_session(session, AT, "turn-2"))] == [b.key]
        assert [i.key for i in run(stores.knowledge.credit_session(session, AT))] == [c.key]
        assert run(stores.knowledge.get(a.key)).usefulness_score == 1

    def test_a_session_credits_only_what_its_own_chain_was_shown(self, stores: Stores) -> None:
        """I11: one session id under two chains is two sessions: each credits what it was shown."""
        a, b = self.add(stores, 1), self.add(stores, 2)
        run(stores.knowledge.record_retrievals([a.key], "q", CHAIN, AT))
        for other in namesakes(CHAIN, ("company_id", "org_id", "team_id", "project_id", "user_id")):
            run(stores.knowledge.record_retrievals([a.key, b.key], "q", other, AT))
        assert [i.key for i in run(stores.knowledge.credit_session(CHAIN, AT))] == [a.key]
        credited = run(stores.knowledge.credit_session(attrs.evolve(CHAIN, org_id="other-org_id"), AT))
        assert [(i.key, i.usefulness_score) for i in credited] == [(a.key, 2), (b.key, 1)]

    def test_references_and_flags_are_stored_as_given(self, stores: Stores) -> None:
        note = self.add(stores, 1)
        assert run(stores.knowledge.add_reference(note.key, AT)).reference_count == 1
        assert run(stores.knowledge.add_reference(note.key, LATER)).reference_count == 2
        assert run(stores.knowledge.set_flag(note.key, True, AT)).flagged_for_review
        assert run(stores.knowledge.set_flag(note.key, True, AT)).flagged_for_review
        assert not run(stores.knowledge.set_flag(note.key, False, AT)).flagged_for_review
        again = run(stores.knowledge.get(note.key))
        assert (again.reference_count, again.flagged_for_review) == (2, False)

    def test_a_status_is_set_only_from_the_status_expected(self, stores: Stores) -> None:
        note = self.add(stores, 1)
        assert run(stores.knowledge.set_status(note.key, NoteStatus.PROPOSED, NoteStatus.ACCEPTED, AT)) is None
        assert run(stores.knowledge.get(note.key)).status is NoteStatus.DRAFT
        moved = run(stores.knowledge.set_status(note.key, NoteStatus.DRAFT, NoteStatus.PROPOSED, LATER))
        assert moved is not None and moved.status is NoteStatus.PROPOSED and moved.key == note.key
        assert run(stores.knowledge.get(note.key)).status is NoteStatus.PROPOSED

    def test_of_writers_moving_one_note_at_once_exactly_one_wins(self, stores: Stores) -> None:
        note = self.add(stores, 1)
        targets = [NoteStatus.PROPOSED, NoteStatus.REJECTED] * 4
        moved = at_once(lambda target: stores.knowledge.set_status(note.key, NoteStatus.DRAFT, target, AT), targets)
        winners = [item for item in moved if item is not None]
        assert len(winners) == 1 and run(stores.knowledge.get(note.key)).status is winners[0].status

    def test_concurrent_counts_all_count(self, stores: Stores) -> None:
        note = self.add(stores, 1)
        sessions = [Scope(session_id=f"s{n}") for n in range(12)]
        at_once(lambda session: stores.knowledge.record_retrievals([note.key], "q", session, AT), sessions)
        at_once(lambda note_id: stores.knowledge.add_reference(note_id, AT), [note.key] * 12)
        at_once(lambda session: stores.knowledge.credit_session(session, AT), sessions)
        after = run(stores.knowledge.get(note.key))
        assert (after.retrieval_count, after.reference_count, after.usefulness_score) == (12, 12, 12)
        assert len(run(stores.knowledge.retrievals(note.key))) == 12

    def test_a_merge_pair_is_kept_once_in_the_order_given(self, stores: Stores) -> None:
        one, two = self.add(stores, 1).key, self.add(stores, 2).key
        first = MergeSuggestion(one, two, 0.93, AT)
        assert run(stores.knowledge.add_merge_suggestion(first))
        assert not run(stores.knowledge.add_merge_suggestion(first))
        assert not run(stores.knowledge.add_merge_suggestion(attrs.evolve(first, similarity=0.5, created_at=LATER)))
        reversed_pair = MergeSuggestion(two, one, 0.93, LATER)
        assert run(stores.knowledge.add_merge_suggestion(reversed_pair))
        assert sorted(run(stores.knowledge.merge_suggestions()), key=lambda s: s.first_id) == [first, reversed_pair]

    def test_notes_counters_and_suggestions_survive_a_reopen(
        self, stores: Stores, open_backend: Callable[[], Stores]
    ) -> None:
        stored = [self.add(stores, seed) for seed in range(5)]
        run(stores.knowledge.record_retrievals([stored[0].key], "q", CHAIN, AT))
        run(stores.knowledge.set_status(stored[1].key, NoteStatus.DRAFT, NoteStatus.PROPOSED, AT))
        run(stores.knowledge.add_merge_suggestion(MergeSuggestion(stored[0].key, stored[1].key, 0.93, AT)))
        before = run(stores.knowledge.items())
        stores.close()
        with open_backend() as again:
            after = run(again.knowledge.items())
            assert after == before and run(again.knowledge.count()) == 5
            assert all(np.array_equal(a.embedding, b.embedding) for a, b in zip(after, before, strict=True))
            assert [r.query for r in run(again.knowledge.retrievals(stored[0].key))] == ["q"]
            assert len(run(again.knowledge.merge_suggestions())) == 1
            (hit, similarity), *_ = run(again.knowledge.search(
                unit_vector(3, again.embedder.dim), 1, caller=OWNER, layer=Layer.PROJECT, statuses={NoteStatus.DRAFT}
            ))
            assert hit.key == stored[3].key and similarity == pytest.approx(1.0, abs=1e-5)


class TrajectoryStoreTests(_Backend):
    """`TrajectoryStore`: executions per session in start order, each stored once, read by chain."""

    def test_a_batch_comes_back_with_every_field(self, stores: Stores) -> None:
        parent = make_execution("plan", project_id="p1", context_snapshot={"turn": "1"}, org_id="o1", team_id="t1")
        child = attrs.evolve(
            make_execution(
                "write_file", arguments={"path": "a.py", "lines": [1, 2], "mode": {"append": True}}, error="disk full",
                parent_id=parent.id, started_at=parent.started_at + timedelta(seconds=1), duration_ms=12.5,
                project_id="p1", step_id="m1",
            ),
            company_id="c2",
        )
        run(stores.trajectories.append([parent, child]))
        assert run(stores.trajectories.load("test-session")).executions == (parent, child)
        assert run(stores.trajectories.count()) == 2

    def test_executions_come_back_in_start_order_per_session(self, stores: Stores) -> None:
        first, second, third = make_executions(["a", "b", "c"])
        other = make_execution("x", session_id="other")
        run(stores.trajectories.append([third, other]))
        run(stores.trajectories.append([first, second]))
        loaded = run(stores.trajectories.load("test-session"))
        assert loaded.session_id == "test-session" and [e.tool_name for e in loaded.executions] == ["a", "b", "c"]
        assert [e.tool_name for e in run(stores.trajectories.load("other")).executions] == ["x"]
        assert run(stores.trajectories.load("nobody")).executions == ()

    def test_an_execution_already_stored_is_skipped(self, stores: Stores) -> None:
        batch = make_executions(["a", "b"])
        run(stores.trajectories.append(batch))
        run(stores.trajectories.append(batch))
        rewritten = attrs.evolve(batch[1], tool_name="rewritten", result="other")
        run(stores.trajectories.append([rewritten, make_execution("c", started_at=batch[1].started_at + timedelta(hours=1))]))
        assert run(stores.trajectories.count()) == 3
        assert [e.tool_name for e in run(stores.trajectories.load("test-session")).executions] == ["a", "b", "c"]

    def test_a_session_id_reused_under_another_chain_reads_only_its_own(self, stores: Stores) -> None:
        """I11: the same session, project and user ids under another company, org, team or
        project, or of another user, are another trajectory."""
        ids: dict[str, Any] = {"session_id": "s1", "user_id": "ada", "project_id": "p1", "team_id": "t1", "org_id": "o1"}
        mine = attrs.evolve(make_execution("mine", **ids), company_id="acme")
        theirs = [
            attrs.evolve(make_execution("c", **ids), company_id="other"),
            *(attrs.evolve(make_execution(part, **{**ids, part: "other"}), company_id="acme")
              for part in ("org_id", "team_id", "project_id", "user_id")),
        ]
        run(stores.trajectories.append([mine, *theirs]))
        assert run(stores.trajectories.load("s1", CHAIN)).executions == (mine,)
        for execution in theirs:
            reader = Scope(execution.company_id, execution.org_id, execution.team_id, execution.project_id,
                           execution.user_id, "s1")
            assert run(stores.trajectories.load("s1", reader)).executions == (execution,)
        assert len(run(stores.trajectories.load("s1")).executions) == 6

    def test_distilled_hashes_are_remembered_across_a_reopen(
        self, stores: Stores, open_backend: Callable[[], Stores]
    ) -> None:
        run(stores.trajectories.mark_distilled("abc", "s1", 7, AT))
        run(stores.trajectories.mark_distilled("abc", "s2", 8, LATER))
        run(stores.trajectories.append([make_execution("kept")]))
        stores.close()
        with open_backend() as again:
            assert run(again.trajectories.is_distilled("abc")) and not run(again.trajectories.is_distilled("def"))
            assert run(again.trajectories.count()) == 1

    def test_a_quarantined_execution_is_kept_escaped_and_apart(self, stores: Stores) -> None:
        odd = make_execution("t\u00f6\u00f6l\ud800", execution_id="id-\u00e9", session_id="s\u2603")
        run(stores.trajectories.quarantine(odd, "the store refused it: \u00ab bad \u00bb"))
        run(stores.trajectories.quarantine(make_execution("second"), "too large"))
        kept = run(stores.trajectories.quarantined())
        assert [row["tool_name"] for row in kept] == ["t\\xf6\\xf6l\\ud800", "second"]
        first = kept[0]
        assert (first["id"], first["session_id"], first["reason"]) == (
            "id-\\xe9", "s\\u2603", "the store refused it: \\xab bad \\xbb",
        )
        assert first["execution"].isascii() and json.loads(first["execution"])["id"] == "id-\u00e9"
        assert run(stores.trajectories.count()) == 0 and run(stores.trajectories.load("s\u2603")).executions == ()

    def test_concurrent_batches_lose_nothing(self, stores: Stores) -> None:
        batches = [make_executions(["a", "b", "c"], session_id=f"s{n}") for n in range(12)]
        at_once(stores.trajectories.append, batches)
        assert run(stores.trajectories.count()) == 36
        for batch in batches:
            assert run(stores.trajectories.load(batch[0].session_id)).executions == tuple(batch)


class TaskStoreTests(_Backend):
    """`TaskStore`: task records by id within a scope, moved only by compare-and-set."""

    ACME = Scope("acme", "o1", "t1", "p1")

    def record(self, task_id: str, scope: Scope | None = None, created: datetime = AT) -> TaskRecord:
        scope = scope or self.ACME
        return TaskRecord(task_id, "fix", {"k": "v", "path": "a.py"}, TaskState.INCOMING, created, created,
                          scope=scope, chain=attrs.evolve(scope, user_id="ann", session_id="s1"))

    def claim(self, stores: Stores, task_id: str, agent: str = "x", scope: Scope | None = None) -> TaskRecord | None:
        return run(stores.tasks.move(task_id, scope or self.ACME, (TaskState.INCOMING,), TaskState.CLAIMED,
                                     updated_at=AT, claimed_by=agent, count_attempt=True, lease_expires_at=LATER))

    def test_a_task_comes_back_whole_with_its_claim_and_lease_after_a_reopen(
        self, stores: Stores, open_backend: Callable[[], Stores]
    ) -> None:
        run(stores.tasks.add(self.record("a")))
        assert run(stores.tasks.get("a", self.ACME)) == self.record("a")
        claimed = self.claim(stores, "a")
        expected = attrs.evolve(self.record("a"), state=TaskState.CLAIMED, claimed_by="x", attempts=1, lease_expires_at=LATER)
        assert claimed == expected
        stores.close()
        with open_backend() as again:
            assert run(again.tasks.get("a", self.ACME)) == expected
            assert run(again.tasks.get("missing", self.ACME)) is None

    def test_a_second_task_with_the_same_id_is_refused(self, stores: Stores) -> None:
        run(stores.tasks.add(self.record("a")))
        with pytest.raises(ValueError):
            run(stores.tasks.add(attrs.evolve(self.record("a"), template="other")))
        assert run(stores.tasks.get("a", self.ACME)) == self.record("a")

    def test_a_move_from_another_state_changes_nothing(self, stores: Stores) -> None:
        run(stores.tasks.add(self.record("a")))
        assert run(stores.tasks.move("a", self.ACME, (TaskState.PROVISIONAL, TaskState.CLAIMED), TaskState.DONE,
                                     updated_at=LATER, claimed_by=None)) is None
        assert run(stores.tasks.move("missing", self.ACME, (TaskState.INCOMING,), TaskState.DONE,
                                     updated_at=LATER, claimed_by=None)) is None
        assert run(stores.tasks.get("a", self.ACME)) == self.record("a")

    def test_in_state_lists_the_tasks_of_a_state_oldest_first(self, stores: Stores) -> None:
        for n, task_id in enumerate(("c", "a", "b", "d")):
            run(stores.tasks.add(self.record(task_id, created=AT + timedelta(seconds=n))))
        self.claim(stores, "a")
        assert [r.id for r in run(stores.tasks.in_state(TaskState.INCOMING, self.ACME))] == ["c", "b", "d"]
        assert [r.id for r in run(stores.tasks.in_state(TaskState.CLAIMED, self.ACME))] == ["a"]
        assert run(stores.tasks.in_state(TaskState.DONE, self.ACME)) == ()

    def test_a_move_guarded_by_the_holder_or_the_last_update_fails_when_either_changed(self, stores: Stores) -> None:
        run(stores.tasks.add(self.record("a")))
        self.claim(stores, "a")
        claimed = (TaskState.CLAIMED,)
        assert run(stores.tasks.move("a", self.ACME, claimed, TaskState.PROVISIONAL, updated_at=LATER,
                                     claimed_by=None, held_by="y")) is None
        assert run(stores.tasks.move("a", self.ACME, claimed, TaskState.INCOMING, updated_at=LATER,
                                     claimed_by=None, unchanged_since=LATER)) is None
        moved = run(stores.tasks.move("a", self.ACME, claimed, TaskState.INCOMING, updated_at=LATER,
                                      claimed_by=None, held_by="x", unchanged_since=AT))
        assert moved is not None
        assert (moved.state, moved.claimed_by, moved.updated_at, moved.lease_expires_at, moved.attempts) == (
            TaskState.INCOMING, None, LATER, None, 1,
        )

    def test_a_renewal_moves_the_lease_and_the_last_update(self, stores: Stores) -> None:
        run(stores.tasks.add(self.record("a")))
        self.claim(stores, "a")
        renewed_until = LATER + timedelta(minutes=5)
        renewed = run(stores.tasks.move("a", self.ACME, (TaskState.CLAIMED,), TaskState.CLAIMED, updated_at=LATER,
                                        claimed_by="x", held_by="x", unchanged_since=AT, lease_expires_at=renewed_until))
        assert renewed is not None and (renewed.lease_expires_at, renewed.updated_at, renewed.attempts) == (
            renewed_until, LATER, 1,
        )
        stale = run(stores.tasks.move("a", self.ACME, (TaskState.CLAIMED,), TaskState.INCOMING, updated_at=LATER,
                                      claimed_by=None, unchanged_since=AT))
        assert stale is None and run(stores.tasks.get("a", self.ACME)) == renewed

    def test_no_namesake_in_another_chain_reads_lists_or_moves_the_task(self, stores: Stores) -> None:
        """I11: the same project id under another company, org or team is another tenant."""
        run(stores.tasks.add(self.record("a")))
        for other in namesakes(self.ACME):
            assert run(stores.tasks.get("a", other)) is None
            assert run(stores.tasks.in_state(TaskState.INCOMING, other)) == ()
            assert self.claim(stores, "a", scope=other) is None
        assert run(stores.tasks.get("a", self.ACME)) == self.record("a")

    def test_of_agents_claiming_one_task_at_once_exactly_one_wins(self, stores: Stores) -> None:
        run(stores.tasks.add(self.record("a")))
        claims = at_once(lambda agent: stores.tasks.move(
            "a", self.ACME, (TaskState.INCOMING,), TaskState.CLAIMED, updated_at=AT, claimed_by=agent, count_attempt=True
        ), [f"agent-{n}" for n in range(8)])
        winners = [claim for claim in claims if claim is not None]
        assert len(winners) == 1
        stored = run(stores.tasks.get("a", self.ACME))
        assert stored is not None and (stored.claimed_by, stored.attempts) == (winners[0].claimed_by, 1)

    def test_concurrent_adds_lose_nothing(self, stores: Stores) -> None:
        records = [self.record(f"task-{n}", created=AT + timedelta(seconds=n)) for n in range(16)]
        at_once(stores.tasks.add, records)
        listed = run(stores.tasks.in_state(TaskState.INCOMING, self.ACME))
        assert sorted(listed, key=lambda r: r.created_at) == records


class AttemptNotesStoreTests(_Backend):
    """`AttemptNotesStore`: one growing text per task, appended to atomically and forgotten on request."""

    def test_a_tasks_text_grows_by_each_append_and_is_forgotten_on_remove(self, stores: Stores) -> None:
        assert run(stores.attempt_notes.read("t1")) is None
        run(stores.attempt_notes.append("t1", "## Attempt 1\n"))
        run(stores.attempt_notes.append("t2", "other task\n"))
        run(stores.attempt_notes.append("t1", "## Attempt 2 \u2014 \u00e9\n"))
        assert run(stores.attempt_notes.read("t1")) == "## Attempt 1\n## Attempt 2 \u2014 \u00e9\n"
        assert run(stores.attempt_notes.remove("t1")) is True
        assert run(stores.attempt_notes.read("t1")) is None and run(stores.attempt_notes.remove("t1")) is False
        assert run(stores.attempt_notes.read("t2")) == "other task\n"

    def test_texts_survive_a_reopen(self, stores: Stores, open_backend: Callable[[], Stores]) -> None:
        run(stores.attempt_notes.append("t1", "kept\n"))
        stores.close()
        with open_backend() as again:
            assert run(again.attempt_notes.read("t1")) == "kept\n"

    def test_concurrent_appends_keep_every_text_whole(self, stores: Stores) -> None:
        pieces = [f"[piece {n}: {'x' * 200}]\n" for n in range(16)]
        at_once(lambda piece: stores.attempt_notes.append("t1", piece), pieces)
        text = run(stores.attempt_notes.read("t1")) or ""
        assert sorted(text.splitlines(keepends=True)) == sorted(pieces)


class ApprovalStoreTests(_Backend):
    """`ApprovalStore`: tool calls awaiting approval per session and scope, each taken once."""

    @staticmethod
    def pending(approval_id: str, scope: Scope = CHAIN, minutes: int = 0) -> PendingApproval:
        session = scope.session_id or "s1"
        request = ApprovalRequest(approval_id, "delete_file", {"path": "a.txt", "force": True, "tags": ["x", None]},
                                  session, f"turn-{approval_id}", AT + timedelta(minutes=minutes))
        call = ToolCall(f"call-{approval_id}", "delete_file", dict(request.arguments))
        messages = (ChatMessage.system("be careful"), ChatMessage.user("delete a.txt \u00e9\x00"),
                    ChatMessage.assistant(None, (call,)))
        return PendingApproval(request, scope, call.id, messages)

    def test_pending_lists_a_sessions_undecided_approvals_oldest_first_whole(self, stores: Stores) -> None:
        other_session = attrs.evolve(CHAIN, session_id="s2")
        for n, approval_id in enumerate(("b", "a", "c")):
            run(stores.approvals.add(self.pending(approval_id, minutes=n)))
        run(stores.approvals.add(self.pending("d", other_session)))
        assert run(stores.approvals.pending(CHAIN, "s1")) == [self.pending("b"), self.pending("a", minutes=1),
                                                              self.pending("c", minutes=2)]
        assert run(stores.approvals.pending(other_session, "s2")) == [self.pending("d", other_session)]
        assert run(stores.approvals.pending(CHAIN, "nobody")) == []

    def test_take_gives_the_approval_once_and_it_is_no_longer_pending(self, stores: Stores) -> None:
        run(stores.approvals.add(self.pending("a")))
        run(stores.approvals.add(self.pending("b", minutes=1)))
        assert run(stores.approvals.take(CHAIN, "a", True)) == self.pending("a")
        assert run(stores.approvals.take(CHAIN, "a", True)) is None
        assert run(stores.approvals.take(CHAIN, "a", False)) is None
        assert run(stores.approvals.take(CHAIN, "missing", False)) is None
        assert run(stores.approvals.pending(CHAIN, "s1")) == [self.pending("b", minutes=1)]
        assert run(stores.approvals.take(CHAIN, "b", False)) == self.pending("b", minutes=1)
        assert run(stores.approvals.pending(CHAIN, "s1")) == []

    def test_the_taker_with_the_first_ones_key_and_decision_gets_it_again_and_no_one_else(self, stores: Stores) -> None:
        """I13: a decision's turn run again after its worker died (same message, same key) finishes it;
        another key, no key, or the other decision still gets None."""
        run(stores.approvals.add(self.pending("a")))
        assert run(stores.approvals.take(CHAIN, "a", True, key="m1")) == self.pending("a")
        assert run(stores.approvals.take(CHAIN, "a", True, key="m1")) == self.pending("a")
        assert run(stores.approvals.take(CHAIN, "a", True, key="m2")) is None
        assert run(stores.approvals.take(CHAIN, "a", True)) is None
        assert run(stores.approvals.take(CHAIN, "a", False, key="m1")) is None
        for other in namesakes(CHAIN):
            assert run(stores.approvals.take(other, "a", True, key="m1")) is None
        assert run(stores.approvals.pending(CHAIN, "s1")) == []

    def test_a_second_approval_with_the_same_id_is_refused(self, stores: Stores) -> None:
        run(stores.approvals.add(self.pending("a")))
        with pytest.raises(ValueError):
            run(stores.approvals.add(self.pending("a", minutes=3)))
        assert run(stores.approvals.pending(CHAIN, "s1")) == [self.pending("a")]

    def test_of_callers_taking_one_approval_at_once_exactly_one_gets_it(self, stores: Stores) -> None:
        """An approval is used once: of deciders racing (two clicks, two servers), one runs the call."""
        run(stores.approvals.add(self.pending("a")))
        taken = at_once(lambda approved: stores.approvals.take(CHAIN, "a", approved), [True, False] * 4)
        assert [t for t in taken if t is not None] == [self.pending("a")]

    def test_no_namesake_in_another_chain_sees_or_takes_the_approval(self, stores: Stores) -> None:
        """I11: the same session and approval id under another chain neither lists nor decides it."""
        run(stores.approvals.add(self.pending("a")))
        for other in namesakes(CHAIN):
            assert run(stores.approvals.pending(other, "s1")) == []
            assert run(stores.approvals.take(other, "a", True)) is None
        assert run(stores.approvals.take(CHAIN, "a", True)) == self.pending("a")

    def test_pending_and_decided_approvals_survive_a_reopen(self, stores: Stores, open_backend: Callable[[], Stores]) -> None:
        run(stores.approvals.add(self.pending("a")))
        run(stores.approvals.add(self.pending("b", minutes=1)))
        run(stores.approvals.take(CHAIN, "b", True))
        stores.close()
        with open_backend() as again:
            assert run(again.approvals.pending(CHAIN, "s1")) == [self.pending("a")]
            assert run(again.approvals.take(CHAIN, "b", True)) is None
            assert run(again.approvals.take(CHAIN, "a", False)) == self.pending("a")


class TurnStorageTests(_Backend):
    """The standard pipeline's turns over this backend's stores when store calls fail (I15)."""

    PROMISED = ("sessions.append", "memory.add")
    """The writes a turn reports on (its history and memory)."""

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors])
    @given(
        st.lists(st.sampled_from(Fault), max_size=12),
        st.lists(st.text("abcdefgh ", min_size=1, max_size=8).map(str.strip).filter(bool), min_size=1, max_size=3),
    )
    def test_i15_a_turn_is_reported_success_only_if_its_exchange_was_stored(
        self, stores: Stores, faults: list[Fault], texts: list[str]
    ) -> None:
        """I15: with store calls failing before or after they happen, a turn reported SUCCESS has its
        exchange in history exactly once, and a turn whose history or memory write failed is not SUCCESS."""
        from agentloop.bots import built_pipeline  # the composition root, which knows the standard pipeline

        injected = StoreFaults.in_order(faults)
        session = Session(f"i15-{next(_unique)}", user_id="ada")
        offered: dict[str, Callable[[], Any]] = {
            "llm": lambda: ScriptedLLM(lambda request: f"echo {request.messages[-1].content}"),
            "channel": RecordingChannel,
            "stores": lambda: failing_stores(stores, injected),
        }
        with built_pipeline("systems:standard_pipeline", offered) as loop:
            for n, text in enumerate(texts):
                said = f"{n} {text}"
                failed_before = len(injected.failed)
                outcome = run(loop.run_turn(session, IncomingMessage(said))).turn_outcome
                assert outcome is not None
                lost = [call for call, _ in injected.failed[failed_before:] if call in self.PROMISED]
                history = run(stores.sessions.recent(history_scope(session), 100))
                exchange = (ChatMessage.user(said), ChatMessage.assistant(f"echo {said}"))
                stored = sum(history[i : i + 2] == exchange for i in range(len(history)))
                if outcome.finish_reason is FinishReason.SUCCESS:
                    assert stored == 1 and not outcome.writes_lost
                if lost:
                    assert outcome.finish_reason is not FinishReason.SUCCESS and outcome.writes_lost


class StoresTests(
    SessionStoreTests, MemoryStoreTests, RagStoreTests, KnowledgeRepositoryTests, TrajectoryStoreTests, TaskStoreTests,
    AttemptNotesStoreTests, ApprovalStoreTests, TurnStorageTests,
):
    """Every port of a bot's `Stores`: subclass this with an `open_backend` fixture."""

    def test_every_store_is_a_backend_of_its_port(self, stores: Stores) -> None:
        ports = {
            "sessions": SessionStore, "memory": MemoryStore, "rag": RagStore, "knowledge": KnowledgeRepository,
            "trajectories": TrajectoryStore, "tasks": TaskStore, "attempt_notes": AttemptNotesStore,
            "approvals": ApprovalStore,
        }
        assert {name: isinstance(getattr(stores, name), port) for name, port in ports.items()} == dict.fromkeys(ports, True)
        not_coroutines = [
            f"{name}.{method}"
            for name, port in ports.items()
            for method in dir(port)
            if not method.startswith("_") and not inspect.iscoroutinefunction(getattr(getattr(stores, name), method))
        ]
        assert not_coroutines == [], "every call of a store port is a coroutine"
        assert isinstance(stores.embedder, Embedder) and stores.url and stores.bot

    def test_stores_opened_with_another_embedder_are_refused_naming_both(
        self, stores: Stores, open_backend: Callable[..., Stores]
    ) -> None:
        """Vectors of two embedders cannot be compared: stores record the one that built
        them and refuse another, even one of the same dimension, until they are re-embedded."""
        run(stores.rag.add(CHAIN, "The shop opens at nine"))
        built_by = stores.embedder
        stores.close()
        other = _Renamed(built_by, "another-model/" + str(built_by.dim))
        with pytest.raises(EmbedderMismatchError) as refused:
            open_backend(embedder=other).close()
        assert repr(built_by.name) in str(refused.value) and repr(other.name) in str(refused.value)
        with open_backend() as again:  # the embedder that built them still opens them
            assert [hit.text for hit in run(again.rag.search(CHAIN, "when does the shop open", 1))] == ["The shop opens at nine"]

    def test_closing_twice_does_nothing(self, stores: Stores) -> None:
        stores.close()
        stores.close()
