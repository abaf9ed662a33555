"""The async ports on the SQLite stores: a call on a file's thread does not stall the event
loop, a call issued after it never overtakes it, and a write answers inline only where the
thread checkpoints the WAL and no other task is using the file."""

from __future__ import annotations

import asyncio
import functools
import itertools
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import pytest

from agentloop.adapters import open_stores
from agentloop.adapters.embedders.wordllama import WordLlamaEmbedder
from agentloop.adapters.sqlite._connection import connect, on_commit, transaction
from agentloop.adapters.sqlite._thread import CHECKPOINT_EVERY, StoreThread
from agentloop.errors import StoreError
from agentloop.messages import ChatMessage
from agentloop.ports.stores import MemoryEntry
from agentloop.scopes import Scope

ADA = Scope(user_id="ada", session_id="s1")


def test_a_slow_call_on_the_store_thread_does_not_stall_the_event_loop() -> None:
    """While a call on the thread takes 200 ms (an index growing, a slow disk) other tasks keep running."""
    thread = StoreThread("slow")

    async def main() -> int:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        await thread.run(time.sleep, 0.2)
        ticker.cancel()
        return ticks

    try:
        assert asyncio.run(main()) >= 5
    finally:
        thread.shutdown()


def test_calls_on_a_busy_bot_file_wait_on_its_thread_in_order(tmp_path: Path) -> None:
    """While a slow RAG add runs on the thread of the bot's file, a history
    write and a read issued after it run there after it, and the read sees the write. The
    embedder's weights are loaded first: a first load runs on a worker thread of its own, and the
    add would reach the file's thread only after the write."""
    embedder = WordLlamaEmbedder()
    embedder.load()
    with open_stores(tmp_path, embedder=embedder) as stores:
        rag: Any = stores.rag.engine  # type: ignore[attr-defined]
        sessions: Any = stores.sessions.engine  # type: ignore[attr-defined]
        add, append, release = rag.add, sessions.append, threading.Event()
        appended_on: list[str] = []

        def gated_add(*args: Any, **kwargs: Any) -> int:
            release.wait(5)
            return int(add(*args, **kwargs))

        def recorded_append(scope: Scope, messages: Sequence[ChatMessage], key: str | None = None) -> bool:
            appended_on.append(threading.current_thread().name)
            return bool(append(scope, messages, key=key))

        rag.add, sessions.append = gated_add, recorded_append

        async def main() -> tuple[bool, tuple[ChatMessage, ...]]:
            adding = asyncio.create_task(stores.rag.add(ADA, "Lunch is at noon."))
            await asyncio.sleep(0)  # the add is handed to the thread and waits there
            writing = asyncio.create_task(stores.sessions.append(ADA, [ChatMessage.user("first")]))
            reading = asyncio.create_task(stores.sessions.recent(ADA, 10))
            await asyncio.sleep(0.05)  # the loop runs on meanwhile
            waited = not writing.done()
            release.set()
            await asyncio.gather(adding, writing)
            return waited, await reading

        assert asyncio.run(main()) == (True, (ChatMessage.user("first"),))
        assert appended_on == ["agentloop-bot.sqlite3"]


def test_writes_answer_inline_only_where_the_thread_checkpoints_and_checkpoints_run_on_it() -> None:
    """A write on an idle thread runs on the loop (a handover costs more than the write) only
    if the thread checkpoints the file: every `CHECKPOINT_EVERY` writes it does, on itself."""
    where = _Where()
    plain = StoreThread("plain")
    checkpointing = StoreThread("checkpointing", checkpoint=lambda: where("checkpoint"))

    async def main() -> None:
        await plain.read(where)
        await plain.write(where)
        await checkpointing.read(where)
        for _ in range(CHECKPOINT_EVERY):
            await checkpointing.write(where)
        await checkpointing.run(where, "next")  # queued behind the checkpoint

    try:
        asyncio.run(main())
    finally:
        plain.shutdown()
        checkpointing.shutdown()
    main_thread = threading.current_thread().name
    assert where.ran == [
        f"call on {main_thread}",
        "call on agentloop-plain",
        *[f"call on {main_thread}"] * (1 + CHECKPOINT_EVERY),
        "checkpoint on agentloop-checkpointing",
        "next on agentloop-checkpointing",
    ]


def test_a_write_after_another_tasks_call_runs_on_the_thread() -> None:
    """While several tasks (sessions) use a file, a write leaves the loop to them: only a
    task that made the file's previous call too writes inline."""
    where = _Where()
    thread = StoreThread("shared", checkpoint=lambda: None)

    async def main() -> None:
        await thread.read(where, "read")
        await asyncio.create_task(thread.write(where, "other task's write"))
        await thread.write(where, "write after the other task")
        await thread.write(where, "second write")

    try:
        asyncio.run(main())
    finally:
        thread.shutdown()
    main_thread = threading.current_thread().name
    assert where.ran == [
        f"read on {main_thread}",
        "other task's write on agentloop-shared",
        "write after the other task on agentloop-shared",
        f"second write on {main_thread}",
    ]


@pytest.mark.parametrize("writers", ["one task", "a task per write"])
def test_the_bot_files_wal_stays_bounded_while_writes_answer_inline_or_on_the_thread(
    tmp_path: Path, writers: str
) -> None:
    """SQLite's own checkpoint is off on the file history, memory and RAG share; its thread
    checkpoints instead, counting the writes that ran inline and those handed to it, so the
    WAL is reused rather than growing with every write."""
    wal = tmp_path / "bot.sqlite3-wal"

    async def append(count: int) -> None:
        for i in range(count):
            write = stores.sessions.append(ADA, [ChatMessage.user(f"message {i}")])
            await (write if writers == "one task" else asyncio.create_task(write))

    with open_stores(tmp_path) as stores:
        asyncio.run(append(CHECKPOINT_EVERY - 1))
        before_first_checkpoint = wal.stat().st_size
        asyncio.run(append(3 * CHECKPOINT_EVERY))
        assert wal.stat().st_size < 2 * before_first_checkpoint
        assert len(asyncio.run(stores.sessions.recent(ADA, 10_000))) == 4 * CHECKPOINT_EVERY - 1


def test_a_database_failing_under_a_store_call_is_a_store_error_and_a_closed_store_says_it_is_closed(tmp_path: Path) -> None:
    stores = open_stores(tmp_path)
    with sqlite3.connect(tmp_path / "bot.sqlite3") as damage:  # another hand drops the history under the bot
        damage.execute("DROP TABLE session_messages")
    with pytest.raises(StoreError, match=r"^the SQLite store bot\.sqlite3 failed: no such table: session_messages; check that"):
        asyncio.run(stores.sessions.recent(ADA, 10))
    stores.close()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        asyncio.run(stores.sessions.recent(ADA, 10))


class GroupedFile:
    """A database file with a table `t`, and a `StoreThread` that commits queued calls together;
    `statements` records every statement the connection ran."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = connect(path)
        self.conn.execute("CREATE TABLE t (x INTEGER NOT NULL)")
        self.lock = threading.Lock()
        self.statements: list[str] = []
        self.conn.set_trace_callback(self.statements.append)
        self.thread = StoreThread("grouped", conn=self.conn, lock=self.lock)

    def insert(self, x: int, fail: BaseException | None = None, end_transaction: bool = False) -> int:
        """Insert `x` in its own transaction; then, if asked, end the enclosing one and raise `fail`."""
        with self.lock, transaction(self.conn):
            self.conn.execute("INSERT INTO t VALUES (?)", (x,))
            if end_transaction:
                self.conn.execute("ROLLBACK")  # what SQLite does itself on a full disk
            if fail is not None:
                raise fail
        return x

    def kept_rows(self) -> list[int]:
        """The rows of `t`, as another connection to the file sees them."""
        with closing(connect(self.path)) as other:
            return sorted(x for (x,) in other.execute("SELECT x FROM t"))

    def run_queued(self, *calls: Callable[[], Any]) -> list[Any]:
        """Hand `calls` to the thread while it is busy, so they queue behind each other; their
        results or errors, and nothing run before them is in `statements`."""
        release = threading.Event()

        async def main() -> list[Any]:
            gate = asyncio.create_task(self.thread.run(release.wait, 5))
            await asyncio.sleep(0.05)  # the thread has taken the gate and waits on it
            queued = [asyncio.create_task(self.thread.run(call)) for call in calls]
            await asyncio.sleep(0)  # each hands its call over
            self.statements.clear()
            release.set()
            await gate
            return list(await asyncio.gather(*queued, return_exceptions=True))

        try:
            return asyncio.run(main())
        finally:
            self.thread.shutdown()
            self.conn.close()


def test_calls_queued_on_a_files_thread_are_committed_together(tmp_path: Path) -> None:
    file = GroupedFile(tmp_path / "grouped.sqlite3")
    assert file.run_queued(*(functools.partial(file.insert, x) for x in range(5))) == [0, 1, 2, 3, 4]
    assert [s for s in file.statements if s in ("BEGIN IMMEDIATE", "COMMIT")] == ["BEGIN IMMEDIATE", "COMMIT"]
    assert file.statements.count("SAVEPOINT agentloop_call") == 5
    assert file.kept_rows() == [0, 1, 2, 3, 4]


def test_a_call_failing_within_a_group_undoes_only_its_own_writes(tmp_path: Path) -> None:
    file = GroupedFile(tmp_path / "grouped.sqlite3")
    wrong = ValueError("not this one")
    results = file.run_queued(
        functools.partial(file.insert, 1), functools.partial(file.insert, 2, fail=wrong), functools.partial(file.insert, 3)
    )
    assert results == [1, wrong, 3]
    assert file.kept_rows() == [1, 3]


def test_an_error_that_ends_the_groups_transaction_fails_the_calls_before_it(tmp_path: Path) -> None:
    """SQLite rolls the whole transaction back on some errors (a full disk): the calls before
    the failing one were undone with it and fail too; the calls after it run on their own."""
    file = GroupedFile(tmp_path / "grouped.sqlite3")
    full = sqlite3.OperationalError("database or disk is full")
    results = file.run_queued(
        functools.partial(file.insert, 1),
        functools.partial(file.insert, 2, fail=full, end_transaction=True),
        functools.partial(file.insert, 3),
    )
    assert [type(result) for result in results] == [StoreError, StoreError, int]
    assert all("database or disk is full" in str(result) for result in results[:2]) and results[2] == 3
    assert file.kept_rows() == [3]


def test_a_group_whose_commit_fails_fails_every_call_and_keeps_none(tmp_path: Path) -> None:
    """A deferred foreign key is checked at COMMIT: the group's commit fails, and so does
    every call in it (a StoreError, as for any database failure), as nothing of theirs was kept."""
    file = GroupedFile(tmp_path / "grouped.sqlite3")
    file.conn.executescript(
        "PRAGMA foreign_keys = ON; CREATE TABLE parent (id INTEGER PRIMARY KEY);"
        "CREATE TABLE child (parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);"
    )

    def orphan() -> None:
        with file.lock, transaction(file.conn):
            file.conn.execute("INSERT INTO child VALUES (7)")

    results = file.run_queued(functools.partial(file.insert, 1), orphan, functools.partial(file.insert, 3))
    assert [type(result) for result in results] == [StoreError] * 3
    assert all("FOREIGN KEY constraint failed" in str(result) for result in results)
    assert file.kept_rows() == []


def test_a_checkpoint_queued_among_calls_runs_after_their_commit(tmp_path: Path) -> None:
    file = GroupedFile(tmp_path / "grouped.sqlite3")
    in_transaction: list[bool] = []

    def queue_a_checkpoint() -> int:
        file.thread._hand_over(lambda: in_transaction.append(file.conn.in_transaction))
        return file.insert(2)

    assert file.run_queued(functools.partial(file.insert, 1), queue_a_checkpoint, functools.partial(file.insert, 3)) == [1, 2, 3]
    assert in_transaction == [False]


def test_a_transaction_whose_commit_fails_is_rolled_back_and_the_next_one_commits(tmp_path: Path) -> None:
    """A deferred constraint fails at COMMIT, which leaves SQLite's transaction open; left so,
    every later write would join it as a savepoint and never be committed."""
    conn = connect(tmp_path / "file.sqlite3")
    conn.executescript(
        "PRAGMA foreign_keys = ON; CREATE TABLE parent (id INTEGER PRIMARY KEY);"
        "CREATE TABLE child (parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);"
    )
    done: list[str] = []
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"), transaction(conn):
        conn.execute("INSERT INTO child VALUES (7)")
        on_commit(conn, lambda: done.append("orphan"))
    assert not conn.in_transaction
    with transaction(conn):
        conn.execute("INSERT INTO parent VALUES (1)")
        on_commit(conn, lambda: done.append("parent"))
    assert done == ["parent"]
    assert connect(tmp_path / "file.sqlite3").execute("SELECT id FROM parent").fetchall() == [(1,)]


def test_many_sessions_writing_at_once_share_commits_and_every_write_is_kept(tmp_path: Path) -> None:
    """Fifty conversations each append history, remember the exchange and index the answer
    at once: their calls queue on the bot file's thread, which commits them in groups, and
    the file then holds every one of them."""
    users = [Scope(user_id=f"user-{n}") for n in range(50)]

    async def conversation(user: Scope) -> None:
        session = attrs.evolve(user, session_id=f"{user.user_id}-s1")
        await stores.sessions.append(session, [ChatMessage.user("When do you open?"), ChatMessage.assistant("At eight.")])
        await stores.memory.add(MemoryEntry(user, session.session_id or "", "When do you open?", "At eight.", datetime.now(UTC)))
        await stores.rag.add(user, f"{user.user_id} is told: we open at eight.", session_id=session.session_id)

    async def everyone() -> None:
        await asyncio.gather(*(conversation(user) for user in users))

    with open_stores(tmp_path) as stores:
        statements: list[str] = []
        stores.sessions.engine._conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
        asyncio.run(everyone())
    assert statements.count("BEGIN IMMEDIATE") < 50  # 100 transactions of their own, 16 calls a group at most
    with open_stores(tmp_path) as reopened:
        for user in users:
            session = attrs.evolve(user, session_id=f"{user.user_id}-s1")
            assert asyncio.run(reopened.sessions.recent(session, 10))[-1] == ChatMessage.assistant("At eight.")
            assert [entry.assistant_text for entry in asyncio.run(reopened.memory.recent(user, 10))] == ["At eight."]
            assert asyncio.run(reopened.rag.texts(user)) == [f"{user.user_id} is told: we open at eight."]


def test_the_callers_of_a_group_resume_one_loop_pass_apart(tmp_path: Path) -> None:
    """Answered at once, a group's callers would all resume in one pass of the loop, and a
    timer due meanwhile would wait for every one of them; another task runs between them."""
    file = GroupedFile(tmp_path / "grouped.sqlite3")
    events: list[str] = []
    release = threading.Event()

    async def caller(x: int) -> None:
        await file.thread.run(file.insert, x)
        events.append(f"answered {x}")

    async def other_task() -> None:
        while True:
            events.append("other")
            await asyncio.sleep(0)

    async def main() -> None:
        gate = asyncio.create_task(file.thread.run(release.wait, 5))
        await asyncio.sleep(0.05)  # the thread waits on the gate; the callers queue behind it
        callers = [asyncio.create_task(caller(x)) for x in range(3)]
        await asyncio.sleep(0)
        other = asyncio.create_task(other_task())  # running on every pass before any answer comes
        release.set()
        await asyncio.gather(gate, *callers)
        other.cancel()

    try:
        asyncio.run(main())
    finally:
        file.thread.shutdown()
        file.conn.close()
    answered = [i for i, event in enumerate(events) if event.startswith("answered")]
    assert len(answered) == 3
    assert all("other" in events[a:b] for a, b in itertools.pairwise(answered))


class _Where:
    """A store call that notes its label and the thread it ran on, in `ran`."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def __call__(self, label: str = "call") -> None:
        self.ran.append(f"{label} on {threading.current_thread().name}")
