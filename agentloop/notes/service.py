"""NoteTaking: the one object a bot holds for note-taking. It ties capture, end-of-session
distillation, retrieval and feedback together so the agent gets better over time."""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

import structlog

from agentloop.context import Session
from agentloop.errors import CaptureDrainError
from agentloop.notes.capture import TrajectoryRecorder
from agentloop.notes.distillation import DistillationResult, DistillationStatus, Distiller
from agentloop.notes.knowledge import KnowledgeBase
from agentloop.notes.models import KnowledgeItem, Layer, LayerIds, RetrievedNote
from agentloop.scopes import history_scope


MAX_OBSERVED_SESSIONS = 10_000
"""The default bound on the sessions `NoteTaking` remembers between observe and end."""


class Closeable(Protocol):
    def close(self) -> None: ...


class NoteTaking:
    """Capture (recorder), distillation at session end, and retrieval with feedback.

    Systems call `observe_session` so that `end_session(session_id)` knows the
    session's org/team/project chain; for a session never observed, pass the
    `Session` itself to `end_session`.
    """

    def __init__(
        self,
        recorder: TrajectoryRecorder,
        distiller: Distiller,
        knowledge: KnowledgeBase,
        *,
        company_id: str = "default",
        resources: Sequence[Closeable] = (),
        max_sessions: int = MAX_OBSERVED_SESSIONS,
        logger: Any = None,
    ) -> None:
        self.recorder = recorder
        self.distiller = distiller
        self.knowledge = knowledge
        self.company_id = company_id
        self.resources = tuple(resources)
        """Stores closed after capture has drained on `close()` (those a factory opened)."""
        self.max_sessions = max_sessions
        """How many observed sessions are remembered, least recently observed dropped first."""
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._log = logger if logger is not None else structlog.get_logger("agentloop.notes")

    def chain(self, session: Session) -> LayerIds:
        """The tenant chain a session may read from (I11)."""
        return LayerIds.of_session(session, self.company_id)

    def observe_session(self, session: Session) -> None:
        """Remember the session's chain for `end_session`; only the `max_sessions` most
        recently observed are kept (a dropped one must be passed as a `Session`)."""
        self._sessions[session.id] = session
        self._sessions.move_to_end(session.id)
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)

    def retrieve(self, query: str, session: Session, *, layer: Layer | None = None, k: int | None = None) -> list[RetrievedNote]:
        """Notes for `query` within the session's chain; the session is recorded as having seen them."""
        self.observe_session(session)
        return self.knowledge.retrieve(query, self.chain(session), session_id=session.id, layer=layer, k=k)

    async def end_session(self, session: str | Session, *, success: bool) -> DistillationResult:
        """Write the session's captured executions, then distill its trajectory (only the
        executions recorded under the session's own tenant chain).

        `session` is the `Session` itself, or its id when it was observed (a system
        called `observe_session`). An id whose chain is unknown — never observed, or
        observed before a restart — is skipped: a note under an invented chain would
        be visible to no real session. Also skips (and logs why) unsuccessful, short
        or already distilled trajectories.
        """
        if isinstance(session, Session):
            session_id = session.id
            self._sessions.pop(session_id, None)
            known: Session | None = session
        else:
            session_id = session
            known = self._sessions.pop(session_id, None)
        wait = self.recorder.settings.drain_timeout_s
        try:  # off the event loop and bounded (drain stops itself; the grace covers a store call that hangs)
            await asyncio.wait_for(asyncio.to_thread(self.recorder.drain, timeout=wait), wait + 0.5)
        except (CaptureDrainError, TimeoutError) as exc:
            failure = str(exc) or (
                f"the trajectory store did not answer within {wait:g} s; "
                f"{self.recorder.stats.pending} captured tool executions are still queued"
            )
            self._log.warning("notes.end_session.capture_pending", session_id=session_id, error=failure)
            return self.distiller.report(DistillationResult(DistillationStatus.FAILED, failure, ""), 0.0)
        scope = history_scope(known, self.company_id) if known is not None else None
        trajectory = self.recorder.store.load(session_id, scope)
        self.recorder.forget_session(session_id)
        if known is None:
            reason = (
                f"session chain unknown: session {session_id!r} was never observed by this process; "
                "pass the Session to end_session"
            )
            self._log.info("notes.end_session", session_id=session_id, status=DistillationStatus.SKIPPED.value, reason=reason)
            return self.distiller.report(DistillationResult(DistillationStatus.SKIPPED, reason, trajectory.content_hash), 0.0)
        result = await self.distiller.distill(trajectory, success=success, owner=self.chain(known), user_id=known.user_id)
        self._log.info("notes.end_session", session_id=session_id, status=result.status.value, reason=result.reason)
        return result

    def record_feedback(self, session_id: str, *, positive: bool = True) -> list[KnowledgeItem]:
        """The user's verdict on a session; positive credits the notes it was shown."""
        return self.knowledge.record_feedback(session_id, positive=positive)

    def close(self) -> None:
        """Stop capture, write every accepted execution (I12), then close the stores —
        every one of them, even when draining or closing another fails."""
        with contextlib.ExitStack() as closing:
            for resource in reversed(self.resources):
                closing.callback(resource.close)
            self.recorder.close()

    def __enter__(self) -> NoteTaking:
        self.recorder.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

