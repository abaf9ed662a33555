"""The per-session gates of `AgentLoop`: turns of one session run one at a time, in arrival
order, whichever event loop or thread started them."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from typing import TypeVar


def _resolve(future: asyncio.Future[bool], held: bool) -> None:
    if not future.done():
        future.set_result(held)


class _LoopWaiter:
    """A turn waiting on an event loop: woken through that loop, so the wait never blocks it."""

    __slots__ = ("future", "held", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[bool] = loop.create_future()
        self.held = False

    def wake(self) -> bool:
        """Hand this waiter the gate, or pass it over (False) when its loop is not running:
        a stopped loop may never run the turn (its owner may close it), so it must not hold
        the gate; if the loop runs again, the turn queues again."""
        self.held = self.loop.is_running()
        try:
            self.loop.call_soon_threadsafe(_resolve, self.future, self.held)
        except RuntimeError:  # its loop is closed: nobody waits there any more
            self.held = False
        return self.held


class _ThreadWaiter:
    """A `run_turn_sync` caller waiting in its own thread."""

    __slots__ = ("event", "held")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.held = False

    def wake(self) -> bool:
        self.held = True
        self.event.set()
        return True


_Waiter = TypeVar("_Waiter", _LoopWaiter, _ThreadWaiter)


class SessionGates:
    """One FIFO gate per session id, shared by every thread and event loop, dropped when idle.

    `run_turn` on any loop and `run_turn_sync` in any thread queue at the same gate, so
    turns of one session never overlap whichever style started them. Taking a free gate
    never waits; a released gate is handed straight to the next waiter in arrival order,
    passing over a turn whose event loop is stopped or closed (it queues again if its
    loop runs again), so a loop its owner stopped cannot hold the session forever.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # A session id is present while a turn holds its gate; its deque is who waits next.
        self._queues: dict[str, deque[_LoopWaiter | _ThreadWaiter]] = {}

    async def acquire(self, session_id: str) -> None:
        while True:
            waiter = self._take_or_queue(session_id, lambda: _LoopWaiter(asyncio.get_running_loop()))
            if waiter is None:
                return
            try:
                if await waiter.future:
                    return
            except BaseException:
                self._abandon(session_id, waiter)
                raise

    def acquire_blocking(self, session_id: str) -> None:
        waiter = self._take_or_queue(session_id, _ThreadWaiter)
        if waiter is None:
            return
        try:
            waiter.event.wait()
        except BaseException:
            self._abandon(session_id, waiter)
            raise

    def take_if_free(self, session_id: str) -> bool:
        """Take the session's gate if no turn holds it (True); never wait."""
        with self._lock:
            return self._queues.setdefault(session_id, fresh := deque[_LoopWaiter | _ThreadWaiter]()) is fresh

    def waiting(self, session_id: str) -> bool:
        """Whether a turn waits behind the one holding the session's gate (one lock-free look)."""
        return bool(self._queues.get(session_id))

    def _take_or_queue(self, session_id: str, new_waiter: Callable[[], _Waiter]) -> _Waiter | None:
        """Take the session's gate if it is free (None), else queue a new waiter and return it."""
        with self._lock:
            queue = self._queues.get(session_id)
            if queue is None:
                self._queues[session_id] = deque()
                return None
            waiter = new_waiter()
            queue.append(waiter)
            return waiter

    def release(self, session_id: str) -> None:
        with self._lock:
            queue = self._queues[session_id]
            while queue:
                if queue.popleft().wake():
                    return
            del self._queues[session_id]

    def _abandon(self, session_id: str, waiter: _LoopWaiter | _ThreadWaiter) -> None:
        """A waiter gave up (cancelled, interrupted): leave the queue, or pass on the
        gate if it was handed over meanwhile."""
        with self._lock:
            queue = self._queues.get(session_id)
            if queue is not None and waiter in queue:
                queue.remove(waiter)
                return
            if not waiter.held:  # passed over: the gate went to another
                return
        self.release(session_id)
