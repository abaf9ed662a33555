"""The async storage ports on the SQLite stores, with a thread per store for what could stall the loop.

The SQLite stores stay synchronous (they are the engine, also used as they are by tools
that have no event loop); these classes give the ports' coroutines on top of them. A
SQLite call can take 10-30 ms (a WAL checkpoint, an index insert), far above the 5 ms
an event loop serving many sessions can spare, so calls are handed to a single-thread
executor per store (`OffThread`): calls of one store keep their order, and the loop
only waits for the answer. sqlite3 and hnswlib release the GIL while they work.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Generic, ParamSpec, Protocol, TypeVar

from agentloop.adapters.sqlite_knowledge import SqliteKnowledgeRepository
from agentloop.adapters.sqlite_memory import SqliteMemoryStore
from agentloop.adapters.sqlite_rag import SqliteRagStore
from agentloop.adapters.sqlite_sessions import SqliteSessionStore
from agentloop.adapters.sqlite_tasks import SqliteTaskStore
from agentloop.adapters.sqlite_trajectories import SqliteTrajectoryStore
from agentloop.components import ToolExecution
from agentloop.messages import ChatMessage
from agentloop.notes.models import KnowledgeItem, Layer, LayerIds, MergeSuggestion, NoteStatus, Retrieval, Trajectory
from agentloop.ports.stores import MemoryEntry, RagHit
from agentloop.ports.tasks import TaskRecord, TaskState
from agentloop.ports.vectors import Vectors
from agentloop.scopes import Scope

P = ParamSpec("P")
R = TypeVar("R")


class OffThread:
    """One single-thread executor that runs a store's calls in the order they came.

    A write always runs there: its commit may checkpoint the WAL, and adding to the index
    embeds and inserts. A read runs inline when the thread is idle (a handover to the
    thread and back costs about 0.1 ms, as much as the read itself), and behind the
    calls already handed over otherwise: it then never waits for the store's lock on
    the loop, and never overtakes a write it follows.
    """

    def __init__(self, name: str) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"agentloop-{name}")
        self._pending = 0
        self._counting = threading.Lock()
        self._shut = False

    async def run(self, call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`call(*args, **kwargs)` on the store's thread, awaited; once the thread is shut
        down, inline, so a closed store answers with its own error."""
        if self._shut:
            return call(*args, **kwargs)
        with self._counting:
            self._pending += 1
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(self._counted, call, *args, **kwargs)
        )

    async def read(self, call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`call(*args, **kwargs)` inline if the store's thread has nothing to do, else there."""
        if self._pending == 0:
            return call(*args, **kwargs)
        return await self.run(call, *args, **kwargs)

    def _counted(self, call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return call(*args, **kwargs)
        finally:
            with self._counting:
                self._pending -= 1

    def shutdown(self) -> None:
        """Let the calls already handed over finish, then stop the thread."""
        self._shut = True
        self._executor.shutdown(wait=True)


class _Closable(Protocol):
    def close(self) -> None: ...


E = TypeVar("E", bound=_Closable)


class _OnItsThread(Generic[E]):
    """A port on a synchronous SQLite store (`engine`) with the store's own `OffThread`."""

    def __init__(self, engine: E) -> None:
        self.engine = engine
        self._thread = OffThread(type(engine).__name__)

    def close(self) -> None:
        """Let the calls already handed over finish, then close the store."""
        self._thread.shutdown()
        self.engine.close()


class AsyncSqliteSessionStore(_OnItsThread[SqliteSessionStore]):
    """The SessionStore port on a `SqliteSessionStore` (`engine`)."""

    async def append(self, scope: Scope, messages: Sequence[ChatMessage], *, key: str | None = None) -> bool:
        return await self._thread.run(self.engine.append, scope, messages, key=key)

    async def recent(self, scope: Scope, limit: int) -> tuple[ChatMessage, ...]:
        return await self._thread.read(self.engine.recent, scope, limit)


class AsyncSqliteMemoryStore(_OnItsThread[SqliteMemoryStore]):
    """The MemoryStore port on a `SqliteMemoryStore` (`engine`)."""

    async def add(self, entry: MemoryEntry) -> None:
        await self._thread.run(self.engine.add, entry)

    async def recent(self, scope: Scope, limit: int, *, exclude_session: str | None = None) -> tuple[MemoryEntry, ...]:
        return await self._thread.read(self.engine.recent, scope, limit, exclude_session=exclude_session)


class AsyncSqliteRagStore(_OnItsThread[SqliteRagStore]):
    """The RagStore port on a `SqliteRagStore` (`engine`); embedding runs on its thread too."""

    async def add(self, scope: Scope, text: str, *, session_id: str | None = None) -> int:
        return await self._thread.run(self.engine.add, scope, text, session_id=session_id)

    async def search(self, scope: Scope, query: str, k: int) -> list[RagHit]:
        return await self._thread.read(self.engine.search, scope, query, k)

    async def count(self) -> int:
        return await self._thread.read(self.engine.__len__)

    async def texts(self, scope: Scope) -> list[str]:
        """Every text stored in `scope`, oldest first."""
        return await self._thread.read(self.engine.texts, scope)


class AsyncSqliteKnowledgeRepository(_OnItsThread[SqliteKnowledgeRepository]):
    """The KnowledgeRepository port on a `SqliteKnowledgeRepository` (`engine`)."""

    async def count(self) -> int:
        return await self._thread.read(self.engine.__len__)

    async def add(self, item: KnowledgeItem) -> KnowledgeItem:
        return await self._thread.run(self.engine.add, item)

    async def add_many(self, items: Sequence[KnowledgeItem]) -> list[int]:
        return await self._thread.run(self.engine.add_many, items)

    async def get(self, note_id: int) -> KnowledgeItem:
        return await self._thread.read(self.engine.get, note_id)

    async def items(self, statuses: Collection[NoteStatus] | None = None) -> list[KnowledgeItem]:
        return await self._thread.read(self.engine.items, statuses)

    async def search(
        self,
        vector: Vectors,
        k: int,
        *,
        caller: LayerIds,
        layer: Layer,
        statuses: Collection[NoteStatus],
        min_similarity: float = 0.0,
    ) -> list[tuple[KnowledgeItem, float]]:
        return await self._thread.read(
            self.engine.search, vector, k, caller=caller, layer=layer, statuses=statuses, min_similarity=min_similarity
        )

    async def record_retrievals(
        self, note_ids: Sequence[int], query: str, session: Scope | None, at: datetime
    ) -> list[KnowledgeItem]:
        return await self._thread.run(self.engine.record_retrievals, note_ids, query, session, at)

    async def retrievals(self, note_id: int) -> list[Retrieval]:
        return await self._thread.read(self.engine.retrievals, note_id)

    async def credit_session(self, session: Scope, at: datetime) -> list[KnowledgeItem]:
        return await self._thread.run(self.engine.credit_session, session, at)

    async def add_reference(self, note_id: int, at: datetime) -> KnowledgeItem:
        return await self._thread.run(self.engine.add_reference, note_id, at)

    async def set_flag(self, note_id: int, flagged: bool, at: datetime) -> KnowledgeItem:
        return await self._thread.run(self.engine.set_flag, note_id, flagged, at)

    async def set_status(
        self, note_id: int, expected: NoteStatus, target: NoteStatus, at: datetime
    ) -> KnowledgeItem | None:
        return await self._thread.run(self.engine.set_status, note_id, expected, target, at)

    async def add_merge_suggestion(self, suggestion: MergeSuggestion) -> bool:
        return await self._thread.run(self.engine.add_merge_suggestion, suggestion)

    async def merge_suggestions(self) -> list[MergeSuggestion]:
        return await self._thread.read(self.engine.merge_suggestions)


class AsyncSqliteTaskStore(_OnItsThread[SqliteTaskStore]):
    """The TaskStore port on a `SqliteTaskStore` (`engine`)."""

    async def add(self, record: TaskRecord) -> None:
        await self._thread.run(self.engine.add, record)

    async def get(self, task_id: str, scope: Scope) -> TaskRecord | None:
        return await self._thread.read(self.engine.get, task_id, scope)

    async def move(
        self,
        task_id: str,
        scope: Scope,
        allowed_from: tuple[TaskState, ...],
        to: TaskState,
        *,
        updated_at: datetime,
        claimed_by: str | None,
        count_attempt: bool = False,
        lease_expires_at: datetime | None = None,
        held_by: str | None = None,
        unchanged_since: datetime | None = None,
    ) -> TaskRecord | None:
        return await self._thread.run(
            self.engine.move, task_id, scope, allowed_from, to, updated_at=updated_at, claimed_by=claimed_by,
            count_attempt=count_attempt, lease_expires_at=lease_expires_at, held_by=held_by,
            unchanged_since=unchanged_since,
        )

    async def in_state(self, state: TaskState, scope: Scope) -> tuple[TaskRecord, ...]:
        return await self._thread.read(self.engine.in_state, state, scope)


class AsyncSqliteTrajectoryStore(_OnItsThread[SqliteTrajectoryStore]):
    """The TrajectoryStore port on a `SqliteTrajectoryStore` (`engine`).

    Every call, reads too, runs on the store's thread: the capture writer appends from its
    own thread at any moment, so a read on the loop could wait there for its lock.
    """

    async def append(self, executions: Sequence[ToolExecution]) -> None:
        await self._thread.run(self.engine.append, executions)

    async def load(self, session_id: str, scope: Scope | None = None) -> Trajectory:
        return await self._thread.run(self.engine.load, session_id, scope)

    async def quarantine(self, execution: ToolExecution, reason: str) -> None:
        await self._thread.run(self.engine.quarantine, execution, reason)

    async def quarantined(self) -> list[dict[str, str]]:
        return await self._thread.run(self.engine.quarantined)

    async def count(self) -> int:
        return await self._thread.run(self.engine.count)

    async def mark_distilled(self, trajectory_hash: str, session_id: str, note_id: int, at: datetime) -> None:
        await self._thread.run(self.engine.mark_distilled, trajectory_hash, session_id, note_id, at)

    async def is_distilled(self, trajectory_hash: str) -> bool:
        return await self._thread.run(self.engine.is_distilled, trajectory_hash)
