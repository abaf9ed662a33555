"""The async ports on the SQLite stores: a slow write does not stall the event loop, and a
read never overtakes a write it follows."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from agentloop.adapters import open_stores
from agentloop.messages import ChatMessage
from agentloop.scopes import Scope

ADA = Scope(user_id="ada", session_id="s1")


def test_a_slow_write_runs_off_the_event_loop(tmp_path: Path) -> None:
    """While a history write takes 200 ms (a WAL checkpoint, a slow disk) other tasks keep running."""
    with open_stores(tmp_path) as stores:
        engine = stores.sessions.engine  # type: ignore[attr-defined]
        write = engine.append

        def slow_append(scope: Scope, messages: Sequence[ChatMessage], key: str | None = None) -> bool:
            time.sleep(0.2)
            return write(scope, messages, key=key)

        engine.append = slow_append

        async def main() -> int:
            ticks = 0

            async def tick() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            ticker = asyncio.create_task(tick())
            await stores.sessions.append(ADA, [ChatMessage.user("hello")])
            ticker.cancel()
            return ticks

        assert asyncio.run(main()) >= 5


def test_a_read_issued_while_a_write_is_pending_sees_that_write(tmp_path: Path) -> None:
    """Reads on an idle store answer inline, but one behind a pending write waits for it."""
    with open_stores(tmp_path) as stores:
        engine = stores.sessions.engine  # type: ignore[attr-defined]
        write, release = engine.append, threading.Event()

        def gated_append(scope: Scope, messages: Sequence[ChatMessage], key: str | None = None) -> bool:
            release.wait(5)
            return write(scope, messages, key=key)

        engine.append = gated_append

        async def main() -> tuple[ChatMessage, ...]:
            writing = asyncio.create_task(stores.sessions.append(ADA, [ChatMessage.user("first")]))
            await asyncio.sleep(0)  # the write is handed to the store's thread and waits there
            reading = asyncio.create_task(stores.sessions.recent(ADA, 10))
            await asyncio.sleep(0.05)
            release.set()
            await writing
            return await reading

        assert asyncio.run(main()) == (ChatMessage.user("first"),)
