"""The async storage ports on the SQLite stores, with a thread per database file for what could stall the loop.

The SQLite stores stay synchronous (they are the engine, also used as they are by tools
that have no event loop); these classes give the ports' coroutines on top of them. A
SQLite call can take 10-30 ms (a WAL checkpoint, an index insert), far above the 5 ms
an event loop serving many sessions can spare, so such calls are handed to the thread
of their database file (`StoreThread`): calls on one file keep their order, and the loop
only waits for the answer. Cheap calls answer inline when the thread is idle; which
ones, and when, `StoreThread` says. sqlite3 and hnswlib release the GIL while they work.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from queue import Empty, SimpleQueue
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

import structlog

from agentloop.adapters.sqlite.connection import closing_on_error, connect, roll_back, transaction_ended
from agentloop.adapters.sqlite.approvals import SqliteApprovalStore
from agentloop.adapters.sqlite.knowledge import SqliteKnowledgeRepository
from agentloop.adapters.sqlite.memory import SqliteMemoryStore
from agentloop.adapters.sqlite.rag import SqliteRagStore
from agentloop.adapters.sqlite.sessions import SqliteSessionStore
from agentloop.adapters.sqlite.tasks import SqliteTaskStore
from agentloop.adapters.sqlite.trajectories import SqliteTrajectoryStore
from agentloop.approvals import PendingApproval
from agentloop.components import ToolExecution
from agentloop.errors import StoreError
from agentloop.messages import ChatMessage
from agentloop.notes.models import KnowledgeItem, Layer, LayerIds, MergeSuggestion, NoteStatus, Retrieval, Trajectory
from agentloop.ports.stores import MemoryEntry, RagHit
from agentloop.ports.tasks import TaskRecord, TaskState
from agentloop.ports.vectors import Vectors
from agentloop.scopes import Scope

P = ParamSpec("P")
R = TypeVar("R")

CHECKPOINT_EVERY = 256
"""Writes between two WAL checkpoints on a file whose writes may run on the loop: at a
few pages each, below the 1000 pages at which SQLite would checkpoint inside a commit."""
GROUP_MOST = 16
"""Most queued calls a file's thread commits at once: enough that a busy bot pays one commit
for many sessions' writes, few enough that the first of them waits little for the last."""

_log = structlog.get_logger("agentloop.stores")
_Work = tuple[Callable[[], Any], asyncio.AbstractEventLoop | None, "asyncio.Future[Any] | None"]


class StoreThread:
    """One thread that runs the calls handed to it one at a time, in the order they came.

    A call that may stall runs there. A read runs inline when the thread has nothing
    queued (a handover to the thread and back costs 50-100 µs, more than most reads),
    and behind the calls already handed over otherwise: it then never waits for the
    store's lock on the loop, and never overtakes a write it follows. A write runs
    inline on the same terms while one task has the thread to itself (with many
    sessions, handing writes over keeps the loop's passes short), and only on a file
    whose WAL this thread checkpoints (`checkpoint`): SQLite's autocheckpoint would run
    inside whichever commit crosses 1000 pages, 6-14 ms on the loop, so every
    `CHECKPOINT_EVERY` writes, wherever they ran, queue one here.

    Given the file's connection (`conn`, guarded by `lock`), the thread commits the calls
    queued behind each other together, up to `GROUP_MOST`: one transaction around them, each
    call's own transaction a savepoint within it, and every answer given after the commit.
    A call that fails undoes only its own writes, unless its error ended the transaction (a
    full disk): then the calls before it in the group fail with it. A failed commit fails
    them all. Nothing answered is uncommitted.
    """

    def __init__(
        self,
        name: str,
        checkpoint: Callable[[], object] | None = None,
        *,
        conn: sqlite3.Connection | None = None,
        lock: threading.Lock | None = None,
    ) -> None:
        self._queue: SimpleQueue[_Work | None] = SimpleQueue()
        self._file = None if conn is None else (conn, lock or threading.Lock())
        self._pending = 0
        self._writes = 0
        self._counting = threading.Lock()
        self._checkpoint = checkpoint
        self._caller: asyncio.Task[Any] | None = None
        self._shut = False
        self._name = name
        self._thread = threading.Thread(target=self._serve, name=f"agentloop-{name}", daemon=True)
        self._thread.start()

    async def run(self, call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`call(*args, **kwargs)` on the thread, awaited; once the thread is shut down,
        inline, so a closed store answers with its own error."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        with self._failures():
            if not self._hand_over(functools.partial(call, *args, **kwargs), loop, future):
                return call(*args, **kwargs)
            return await future

    async def read(self, call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`call(*args, **kwargs)` inline if the thread has nothing to do, else there."""
        self._caller = asyncio.current_task()
        if self._pending == 0:
            with self._failures():
                return call(*args, **kwargs)
        return await self.run(call, *args, **kwargs)

    @contextmanager
    def _failures(self) -> Iterator[None]:
        """Turn the database failing into a StoreError; a ProgrammingError (a closed store, a
        mistake in how it was asked, which retrying cannot mend) stays as it is."""
        try:
            yield
        except sqlite3.ProgrammingError:
            raise
        except sqlite3.DatabaseError as error:
            raise StoreError(f"the SQLite store {self._name}", str(error)) from error

    async def write(self, call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`call(*args, **kwargs)` inline like a read while one task has the file to itself
        (it made the previous call too) and this thread checkpoints the file, else there."""
        caller, self._caller = self._caller, asyncio.current_task()
        if self._checkpoint is None or caller is None or caller is not self._caller:
            result = await self.run(call, *args, **kwargs)
        else:
            result = await self.read(call, *args, **kwargs)
        self._count_write()
        return result

    def _count_write(self) -> None:
        """Count a write, and queue a checkpoint every `CHECKPOINT_EVERY` of them."""
        if self._checkpoint is None:
            return
        with self._counting:
            self._writes += 1
            due = self._writes >= CHECKPOINT_EVERY
            if due:
                self._writes = 0
        if due:
            self._hand_over(self._checkpoint)

    def _hand_over(
        self, work: Callable[[], Any], loop: asyncio.AbstractEventLoop | None = None, future: asyncio.Future[Any] | None = None
    ) -> bool:
        """Queue `work` (its answer to `future` on `loop`); False once the thread is shut down."""
        with self._counting:
            if self._shut:
                return False
            self._pending += 1
            self._queue.put((work, loop, future))
        return True

    def _serve(self) -> None:
        item = self._queue.get()
        while item is not None:
            group = [item]
            after: list[_Work | None] = []  # a queued item that may not join the group
            if self._file is not None and item[2] is not None:
                while len(group) < GROUP_MOST:
                    try:
                        queued = self._queue.get_nowait()
                    except Empty:
                        break
                    if queued is None or queued[2] is None:  # the end, or a checkpoint: after the commit
                        after.append(queued)
                        break
                    group.append(queued)
            self._answer(group, self._run_group(group) if len(group) > 1 else [_call(item[0])])
            item = after[0] if after else self._queue.get()

    def _run_group(self, group: list[_Work]) -> list[tuple[Any, BaseException | None]]:
        """Run the calls of `group` in one transaction; each one's result or error."""
        assert self._file is not None
        conn, lock = self._file
        try:
            with lock:
                conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error:  # the file is busy beyond its timeout: each call on its own, as ever
            return [_call(work) for work, _, _ in group]
        outcomes: list[tuple[Any, BaseException | None]] = []
        committing = True
        for work, _, _ in group:
            result, error = _call(work)
            if committing and not conn.in_transaction:  # the call ended the transaction
                committing = False
                with lock:
                    transaction_ended(conn, committed=error is None)
                if error is not None:  # with an error that undid the calls before it too
                    outcomes = [(None, error)] * len(outcomes)
            outcomes.append((result, error))
        if committing:
            with lock:
                try:
                    conn.execute("COMMIT")
                except BaseException as exc:
                    roll_back(conn)
                    return [(None, exc)] * len(group)
                transaction_ended(conn, committed=True)
        return outcomes

    def _answer(self, group: list[_Work], outcomes: list[tuple[Any, BaseException | None]]) -> None:
        """Settle each call's future on its loop (one hand-back per loop), or log a background call's failure."""
        with self._counting:
            self._pending -= len(group)
        answers: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any, BaseException | None]]] = {}
        for (_, loop, future), (result, error) in zip(group, outcomes, strict=True):
            if loop is None or future is None:
                if error is not None:
                    _log.warning("stores.background_call_failed", thread=self._thread.name, error=repr(error))
                continue
            answers.setdefault(loop, []).append((future, result, error))
        for loop, settled in answers.items():
            try:
                loop.call_soon_threadsafe(_settle_all, settled)
            except RuntimeError:  # the loop was closed: nobody is waiting for the answers
                for _, _, error in settled:
                    if error is not None:
                        _log.warning("stores.unawaited_call_failed", thread=self._thread.name, error=repr(error))

    def shutdown(self) -> None:
        """Let the calls already handed over finish, then stop the thread; again does nothing."""
        with self._counting:
            if self._shut:
                return
            self._shut = True
            self._queue.put(None)
        self._thread.join()


def _call(work: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """`work()`'s result, or the error it raised."""
    try:
        return work(), None
    except StopIteration as exc:  # a future refuses StopIteration, and its awaiter would hang
        return None, RuntimeError(f"a store call raised StopIteration: {exc!r}")
    except BaseException as exc:  # handed to whoever awaits it
        return None, exc


def _settle_all(answers: list[tuple[asyncio.Future[Any], Any, BaseException | None]], start: int = 0) -> None:
    """Settle the answer at `start`, and the next in the loop's next pass: a group's callers
    then resume one pass apart, with timers and other tasks between them, rather than all in
    one long pass (lag p99 at 100 sessions: 3.1-4.0 ms settled at once, 1.8-2.0 ms spread)."""
    future, result, error = answers[start]
    _settle(future, result, error)
    if start + 1 < len(answers):
        future.get_loop().call_soon(_settle_all, answers, start + 1)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():  # its awaiter was cancelled: say what went wrong, as nobody else will
        if error is not None:
            _log.warning("stores.unawaited_call_failed", error=repr(error))
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class SqliteFile:
    """One database file that several stores share: one connection, its lock, and one `StoreThread`.

    One connection keeps its page cache warm across the stores' calls (another
    connection's commit would empty it) and leaves `PRAGMA data_version` moving only for
    other processes' commits. The thread checkpoints the WAL, so writes may run inline.
    """

    def __init__(self, path: str | Path) -> None:
        with closing_on_error(connect(path)) as conn:
            conn.execute("PRAGMA wal_autocheckpoint=0")
        self.conn = conn
        self.lock = threading.Lock()
        self.thread = StoreThread(Path(path).name, checkpoint=self._checkpoint, conn=conn, lock=self.lock)

    def _checkpoint(self) -> None:
        with self.lock:
            self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def close(self) -> None:
        """Let the calls already handed over finish, then close the connection."""
        self.thread.shutdown()
        with self.lock:
            self.conn.close()


class _Closable(Protocol):
    def close(self) -> None: ...


E = TypeVar("E", bound=_Closable)


class _OnItsThread(Generic[E]):
    """A port on a synchronous SQLite store (`engine`), calling it through `thread`
    (that of the store's file when it shares one, else a thread of its own)."""

    def __init__(self, engine: E, thread: StoreThread | None = None) -> None:
        self.engine = engine
        self._thread = thread or StoreThread(type(engine).__name__)

    def close(self) -> None:
        """Let the calls already handed over finish, then close the store."""
        self._thread.shutdown()
        self.engine.close()


class AsyncSqliteSessionStore(_OnItsThread[SqliteSessionStore]):
    """The SessionStore port on a `SqliteSessionStore` (`engine`)."""

    async def append(self, scope: Scope, messages: Sequence[ChatMessage], *, key: str | None = None) -> bool:
        return await self._thread.write(self.engine.append, scope, messages, key=key)

    async def recent(self, scope: Scope, limit: int) -> tuple[ChatMessage, ...]:
        return await self._thread.read(self.engine.recent, scope, limit)


class AsyncSqliteMemoryStore(_OnItsThread[SqliteMemoryStore]):
    """The MemoryStore port on a `SqliteMemoryStore` (`engine`)."""

    async def add(self, entry: MemoryEntry) -> None:
        await self._thread.write(self.engine.add, entry)

    async def recent(self, scope: Scope, limit: int, *, exclude_session: str | None = None) -> tuple[MemoryEntry, ...]:
        return await self._thread.read(self.engine.recent, scope, limit, exclude_session=exclude_session)


class AsyncSqliteRagStore(_OnItsThread[SqliteRagStore]):
    """The RagStore port on a `SqliteRagStore` (`engine`); texts are embedded first (awaited,
    so an embedder that waits on a server holds up neither the loop nor the file's thread).
    An add never waits for the graph: the index's own worker inserts the text there."""

    async def add(self, scope: Scope, text: str, *, session_id: str | None = None) -> int:
        vector = await self.engine.embedder.aembed([text])
        return await self._thread.write(self.engine.add, scope, text, session_id=session_id, vector=vector)

    async def search(self, scope: Scope, query: str, k: int) -> list[RagHit]:
        if k <= 0:
            return []
        vector = await self.engine.embedder.aembed([query])
        return await self._thread.read(self.engine.search, scope, query, k, vector=vector)

    async def count(self) -> int:
        return await self._thread.read(self.engine.__len__)

    async def texts(self, scope: Scope) -> list[str]:
        return await self._thread.read(self.engine.texts, scope)


class AsyncSqliteApprovalStore(_OnItsThread[SqliteApprovalStore]):
    """The ApprovalStore port on a `SqliteApprovalStore` (`engine`)."""

    async def add(self, pending: PendingApproval) -> None:
        await self._thread.write(self.engine.add, pending)

    async def pending(self, scope: Scope, session_id: str) -> list[PendingApproval]:
        return await self._thread.read(self.engine.pending, scope, session_id)

    async def take(self, scope: Scope, approval_id: str, approved: bool, *, key: str | None = None) -> PendingApproval | None:
        return await self._thread.write(functools.partial(self.engine.take, key=key), scope, approval_id, approved)


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
        self, note_ids: Sequence[int], query: str, session: Scope | None, at: datetime, turn_id: str | None = None
    ) -> list[KnowledgeItem]:
        return await self._thread.run(self.engine.record_retrievals, note_ids, query, session, at, turn_id)

    async def retrievals(self, note_id: int) -> list[Retrieval]:
        return await self._thread.read(self.engine.retrievals, note_id)

    async def credit_session(self, session: Scope, at: datetime, turn_id: str | None = None) -> list[KnowledgeItem]:
        return await self._thread.run(self.engine.credit_session, session, at, turn_id)

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
