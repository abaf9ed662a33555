"""IdleSessions: ends (and so distils) the sessions nobody has spoken in for a while, for
processes such as workers and servers where no user says goodbye."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import attrs

from agentloop._log import get_logger
from agentloop.context import Session
from agentloop.notes.distillation import DistillationResult
from agentloop.notes.service import NoteTaking
from agentloop.ports.clock import Clock, SystemClock
from agentloop.scopes import Scope, history_scope


@attrs.define
class _Seen:
    session: Session
    last_active: float
    success: bool


class IdleSessions:
    """The last activity of each session seen (`touch` on every turn); those idle longer than
    `idle_after` seconds are ended through `NoteTaking.end_session`, by `end_idle` or by the
    background task `start` runs every `check_every` seconds until `stop`.

    Sessions are told apart by their whole chain, like note-taking does. A session ended
    here is forgotten, so it is ended once; a later turn makes it active again, and ending
    a session that was already distilled is harmless (distillation skips it).
    """

    def __init__(
        self,
        note_taking: NoteTaking,
        *,
        idle_after: float,
        check_every: float | None = None,
        clock: Clock | None = None,
        logger: Any = None,
    ) -> None:
        if idle_after <= 0:
            raise ValueError(f"idle_after must be a positive number of seconds, not {idle_after!r}")
        self.note_taking = note_taking
        self.idle_after = idle_after
        self.check_every = min(idle_after, 60.0) / 2 if check_every is None else check_every
        """Seconds between looks for idle sessions (default: half the idle time, at most 30 s)."""
        self.clock: Clock = clock or SystemClock()
        self._seen: dict[Scope, _Seen] = {}
        self._task: asyncio.Task[None] | None = None
        self._log = logger if logger is not None else get_logger("agentloop.notes.idle")

    def __len__(self) -> int:
        """How many sessions are being watched (seen and not ended yet)."""
        return len(self._seen)

    def touch(self, session: Session, *, success: bool = True) -> None:
        """The session was active now; `success` says whether its latest turn went well, which
        becomes the session's outcome if it is ended for being idle."""
        key = history_scope(session, self.note_taking.company_id)
        self._seen[key] = _Seen(session, self.clock.monotonic(), success)

    async def end(self, session: Session, *, success: bool | None = None) -> DistillationResult:
        """End the session now (an explicit end): distil it, successful as given or, by
        default, as its latest `touch` said; it is no longer watched."""
        seen = self._seen.pop(history_scope(session, self.note_taking.company_id), None)
        if success is None:
            success = seen.success if seen is not None else True
        return await self.note_taking.end_session(session, success=success)

    def forget(self, erased: Callable[[Scope], bool]) -> None:
        """Stop watching the sessions whose chain `erased` covers, so none is ended (distilled) after its erase."""
        for key in [key for key in self._seen if erased(key)]:
            del self._seen[key]

    async def end_idle(self) -> list[DistillationResult]:
        """End every watched session idle longer than `idle_after`; what distillation made of each."""
        now = self.clock.monotonic()
        idle = [key for key, seen in self._seen.items() if now - seen.last_active > self.idle_after]
        results = []
        for key in idle:
            seen = self._seen[key]
            self._log.info("notes.idle_session", session_id=seen.session.id, idle_s=round(now - seen.last_active, 3))
            results.append(await self.note_taking.end_session(seen.session, success=seen.success))
            if self._seen.get(key) is seen:  # not touched again while it was being ended
                del self._seen[key]
        return results

    def start(self) -> None:
        """Look for idle sessions every `check_every` seconds in a background task on the
        running event loop, until `stop`."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._watch(), name="agentloop idle sessions")

    async def stop(self) -> None:
        """Stop the background task; sessions not ended yet (one whose ending this cut off
        too) stay watched, for a later `end_idle` or `end`."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.check_every)
            try:
                await self.end_idle()
            except Exception as error:  # one failed pass must not stop idle ending for good
                self._log.warning("notes.idle_sessions.failed", error=str(error), exc_info=error)

    async def __aenter__(self) -> IdleSessions:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
