"""The thread of a SQLite database file, and the base of the async ports that call their store through it.

The SQLite stores stay synchronous (they are the engine, also used as they are by tools
that have no event loop); each store's module gives its port's coroutines on top of it (`OnItsThread`). A
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from queue import Empty, SimpleQueue
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from agentloop._log import get_logger
from agentloop.adapters.sqlite._connection import closing_on_error, connect, roll_back, transaction_ended
from agentloop.errors import StoreError

P = ParamSpec("P")
R = TypeVar("R")

CHECKPOINT_EVERY = 256
"""Writes between two WAL checkpoints on a file whose writes may run on the loop: at a
few pages each, below the 1000 pages at which SQLite would checkpoint inside a commit."""
GROUP_MOST = 16
"""Most queued calls a file's thread commits at once: enough that a busy bot pays one commit
for many sessions' writes, few enough that the first of them waits little for the last."""

_log = get_logger("agentloop.stores")
_Work = tuple[Callable[[], Any], asyncio.AbstractEventLoop | None, "asyncio.Future[Any] | None"]


class StoreThread:
    """One thread that runs the calls handed to it one at a time, in the order they came.

    A call that may stall runs there. A read runs inline when the thread has nothing
    queued (a handover to the thread and back costs more than most reads),
    and behind the calls already handed over otherwise: it then never waits for the
    store's lock on the loop, and never overtakes a write it follows. A write runs
    inline on the same terms while one task has the thread to itself (with many
    sessions, handing writes over keeps the loop's passes short), and only on a file
    whose WAL this thread checkpoints (`checkpoint`): SQLite's autocheckpoint would run
    inside whichever commit crosses 1000 pages, holding up the loop, so every
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
            return self._inline(call, *args, **kwargs)
        return await self.run(call, *args, **kwargs)

    def _inline(self, call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`call(*args, **kwargs)` here, on the loop (`_failures` written out: most turns' store calls come here)."""
        try:
            return call(*args, **kwargs)
        except sqlite3.ProgrammingError:
            raise
        except sqlite3.DatabaseError as error:
            raise self._store_error(error) from error

    @contextmanager
    def _failures(self) -> Iterator[None]:
        """Turn the database failing into a StoreError; a ProgrammingError (a closed store, a
        mistake in how it was asked, which retrying cannot mend) stays as it is."""
        try:
            yield
        except sqlite3.ProgrammingError:
            raise
        except sqlite3.DatabaseError as error:
            raise self._store_error(error) from error

    def _store_error(self, error: sqlite3.DatabaseError) -> StoreError:
        return StoreError(f"the SQLite store {self._name}", str(error))

    async def write(self, call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`call(*args, **kwargs)` inline like a read while one task has the file to itself
        (it made the previous call too) and this thread checkpoints the file, else there."""
        caller, self._caller = self._caller, asyncio.current_task()
        if self._checkpoint is None or caller is None or caller is not self._caller or self._pending:
            result = await self.run(call, *args, **kwargs)
        else:
            result = self._inline(call, *args, **kwargs)
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
    one long pass, which would hold up the loop (docs/performance.md has the lag either way)."""
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


class OnItsThread(Generic[E]):
    """A port on a synchronous SQLite store (`engine`), calling it through `thread`
    (that of the store's file when it shares one, else a thread of its own)."""

    def __init__(self, engine: E, thread: StoreThread | None = None) -> None:
        self.engine = engine
        self._thread = thread or StoreThread(type(engine).__name__)

    def close(self) -> None:
        """Let the calls already handed over finish, then close the store."""
        self._thread.shutdown()
        self.engine.close()
