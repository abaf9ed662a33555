"""The async ports on the SQLite stores: a call on a file's thread does not stall the event
loop, a call issued after it never overtakes it, and a write answers inline only where the
thread checkpoints the WAL and no other task is using the file."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agentloop.adapters import open_stores
from agentloop.adapters.sqlite_async import CHECKPOINT_EVERY, StoreThread
from agentloop.errors import StoreError
from agentloop.messages import ChatMessage
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
    write and a read issued after it run there after it, and the read sees the write."""
    with open_stores(tmp_path) as stores:
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
    ran: list[str] = []

    def where(label: str = "call") -> None:
        ran.append(f"{label} on {threading.current_thread().name}")

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
    assert ran == [
        f"call on {main_thread}",
        "call on agentloop-plain",
        *[f"call on {main_thread}"] * (1 + CHECKPOINT_EVERY),
        "checkpoint on agentloop-checkpointing",
        "next on agentloop-checkpointing",
    ]


def test_a_write_after_another_tasks_call_runs_on_the_thread() -> None:
    """While several tasks (sessions) use a file, a write leaves the loop to them: only a
    task that made the file's previous call too writes inline."""
    ran: list[str] = []

    def where(label: str) -> None:
        ran.append(f"{label} on {threading.current_thread().name}")

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
    assert ran == [
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
