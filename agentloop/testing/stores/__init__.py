"""The store conformance suite: test classes a storage backend subclasses, giving one fixture.

A backend proves it keeps the contract of every storage port (as the ports' docstrings
state it: order, limits, tenant isolation, compare-and-set, dedup, counters, leases,
reopening, concurrent writers) by passing these tests; its own tests then only cover
what is particular to it (files, indexes, migrations).

    import pytest
    from agentloop.adapters import HashingEmbedder, open_stores
    from agentloop.testing.stores import StoresTests

    class TestMyStores(StoresTests):
        @pytest.fixture
        def open_backend(self, tmp_path):
            return lambda embedder=None: open_stores(tmp_path, embedder=embedder or HashingEmbedder())

The fixture contract: `open_backend` returns a function that opens the backend's
`Stores` at one place, empty before the first call. Calling it again after the stores
it returned were closed must open the same data again (that is how reopening is tested).
It takes an optional `embedder` and opens the stores with it instead of the usual one
(that is how refusing a store's wrong embedder is tested).
The stores must embed with `HashingEmbedder` (any dim; not the default): the retrieval tests
rely on texts sharing words being similar, and on a text with no words embedding to
nothing. Each test closes the stores it opens.

Each port has its own class (`SessionStoreTests`, `MemoryStoreTests`, `RagStoreTests`,
`KnowledgeRepositoryTests`, `TrajectoryStoreTests`, `TaskStoreTests`,
`AttemptNotesStoreTests`, `ApprovalStoreTests`, `SummaryStoreTests`, `UsageStoreTests`) for a backend of
some ports only; `StoresTests` inherits them all, and `TurnStorageTests`, which runs the
standard pipeline's turns over the backend's stores made to fail at random points by
`failing_stores` (invariant I15). The tests are plain synchronous tests
that run each store call with `asyncio.run` (no async plugin needed); the concurrency
tests call from several threads at once, each with its own event loop.
"""


from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

import attrs
import pytest

from agentloop.ports.stores import Stores
from agentloop.adapters.errors import EmbedderMismatchError
from agentloop.ports import (
    ApprovalStore,
    AttemptNotesStore,
    Embedder,
    KnowledgeRepository,
    MemoryStore,
    RagStore,
    SessionStore,
    SummaryStore,
    TaskStore,
    TrajectoryStore,
    UsageStore,
)
from agentloop.ports.vectors import Vectors
from agentloop.testing.stores._kit import CHAIN, Fault, StoreFaults, at_once, failing_stores, namesakes, run
from agentloop.testing.stores.sessions import SessionStoreTests
from agentloop.testing.stores.memory import MemoryStoreTests
from agentloop.testing.stores.rag import RagStoreTests
from agentloop.testing.stores.knowledge import KnowledgeRepositoryTests
from agentloop.testing.stores.trajectories import TrajectoryStoreTests
from agentloop.testing.stores.tasks import TaskStoreTests
from agentloop.testing.stores.attempt_notes import AttemptNotesStoreTests
from agentloop.testing.stores.approvals import ApprovalStoreTests
from agentloop.testing.stores.summaries import SummaryStoreTests
from agentloop.testing.stores.turns import TurnStorageTests
from agentloop.testing.stores.usage import UsageStoreTests
from agentloop.testing.stores.erasure import ErasureProperties, ErasureTests


__all__ = [
    "ApprovalStoreTests",
    "AttemptNotesStoreTests",
    "ErasureProperties",
    "ErasureTests",
    "Fault",
    "KnowledgeRepositoryTests",
    "MemoryStoreTests",
    "RagStoreTests",
    "SessionStoreTests",
    "StoreFaults",
    "StoresTests",
    "SummaryStoreTests",
    "TaskStoreTests",
    "TrajectoryStoreTests",
    "TurnStorageTests",
    "UsageStoreTests",
    "at_once",
    "failing_stores",
    "namesakes",
    "run",
]


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


class StoresTests(
    SessionStoreTests, MemoryStoreTests, RagStoreTests, KnowledgeRepositoryTests, TrajectoryStoreTests, TaskStoreTests,
    AttemptNotesStoreTests, ApprovalStoreTests, SummaryStoreTests, UsageStoreTests, TurnStorageTests, ErasureTests,
    ErasureProperties,
):
    """Every port of a bot's `Stores`: subclass this with an `open_backend` fixture."""

    def test_every_store_is_a_backend_of_its_port(self, stores: Stores) -> None:
        ports = {
            "sessions": SessionStore, "memory": MemoryStore, "rag": RagStore, "knowledge": KnowledgeRepository,
            "trajectories": TrajectoryStore, "tasks": TaskStore, "attempt_notes": AttemptNotesStore,
            "approvals": ApprovalStore, "summaries": SummaryStore, "usage": UsageStore,
        }
        assert {name: isinstance(getattr(stores, name), port) for name, port in ports.items()} == dict.fromkeys(ports, True)
        not_coroutines = [
            f"{name}.{method}"
            for name, port in ports.items()
            for method in dir(port)
            if not method.startswith("_") and method != "export"
            and not inspect.iscoroutinefunction(getattr(getattr(stores, name), method))
        ]
        assert not_coroutines == [], "every call of a store port is a coroutine (export: an async iterator)"
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
