"""NoteTaking: the one object a bot holds for note-taking. It ties capture, end-of-session
distillation, retrieval and feedback together so the agent gets better over time."""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol

import attrs

from agentloop._log import get_logger
from agentloop.components import ToolExecution
from agentloop.context import Session
from agentloop.notes.errors import CaptureDrainError
from agentloop.notes.capture import TrajectoryRecorder
from agentloop.notes.distillation import DistillationResult, DistillationStatus, Distiller
from agentloop.notes.knowledge import KnowledgeBase
from agentloop.notes.models import KnowledgeItem, Layer, LayerIds, RetrievedNote
from agentloop.scopes import DEFAULT_COMPANY, Scope, history_scope


MAX_OBSERVED_SESSIONS = 10_000
"""The default bound on the sessions `NoteTaking` remembers between observe and end."""


class Closeable(Protocol):
    def close(self) -> None: ...


class NoteTaking:
    """Capture (recorder), distillation at session end, and retrieval with feedback.

    A session is told apart from another with the same id by its whole chain (company,
    org, team, project, user): pass the `Session` to `end_session` and `record_feedback`.
    Executions reach capture through `capture`, which stamps them with the company.
    """

    def __init__(
        self,
        recorder: TrajectoryRecorder,
        distiller: Distiller,
        knowledge: KnowledgeBase,
        *,
        company_id: str = DEFAULT_COMPANY,
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
        self._sessions: OrderedDict[Scope, Session] = OrderedDict()
        """The observed sessions by their full chain, least recently observed first."""
        self._log = logger if logger is not None else get_logger("agentloop.notes")

    def chain(self, session: Session) -> LayerIds:
        """The tenant chain a session may read from (I11)."""
        return LayerIds.of_session(session, self.company_id)

    def observe_session(self, session: Session) -> None:
        """Remember the session's chain for `end_session`; only the `max_sessions` most
        recently observed are kept (a dropped one must be passed as a `Session`)."""
        key = history_scope(session, self.company_id)
        self._sessions[key] = session
        self._sessions.move_to_end(key)
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)

    def capture(self, execution: ToolExecution) -> bool:
        """Hand a finished tool execution to the recorder (non-blocking), stamped with this
        deployment's company so that only this company's sessions distill it (I11)."""
        if execution.company_id != self.company_id:
            execution = attrs.evolve(execution, company_id=self.company_id)
        return self.recorder.enqueue(execution)

    async def retrieve(
        self, query: str, session: Session, *, turn_id: str | None = None, layer: Layer | None = None, k: int | None = None
    ) -> list[RetrievedNote]:
        """Notes for `query` within the session's chain; the session (by its whole chain) and
        the turn are recorded as having seen them, so feedback on that turn credits them."""
        self.observe_session(session)
        return await self.knowledge.retrieve(
            query, self.chain(session), session=history_scope(session, self.company_id), turn_id=turn_id, layer=layer, k=k
        )

    async def end_session(self, session: str | Session, *, success: bool) -> DistillationResult:
        """Write the session's captured executions, then distill its trajectory (only the
        executions recorded under the session's own tenant chain).

        `session` is the `Session` itself, or its id when exactly one observed session has
        that id. An id whose chain is unknown (never observed, observed before a restart)
        or ambiguous (observed under several chains) is skipped: a note under a guessed
        chain would reach the wrong tenant or none. Also skips (and logs why)
        unsuccessful, short or already distilled trajectories.
        """
        unknown = ""
        if isinstance(session, Session):
            session_id = session.id
            self._sessions.pop(history_scope(session, self.company_id), None)
            known: Session | None = session
        else:
            session_id = session
            known, unknown = self._observed(session_id)
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
        trajectory = await self.recorder.store.load(session_id, scope)
        self.recorder.forget_session(session_id)
        if known is None:
            self._log.info("notes.end_session", session_id=session_id, status=DistillationStatus.SKIPPED.value, reason=unknown)
            return self.distiller.report(DistillationResult(DistillationStatus.SKIPPED, unknown, trajectory.content_hash), 0.0)
        result = await self.distiller.distill(trajectory, success=success, owner=self.chain(known), user_id=known.user_id)
        self._log.info("notes.end_session", session_id=session_id, status=result.status.value, reason=result.reason)
        return result

    async def record_feedback(
        self, session: Session, *, positive: bool = True, turn_id: str | None = None
    ) -> list[KnowledgeItem]:
        """The user's verdict on one turn of a session (`turn_id`) or on all of it (None);
        positive credits the notes that turn (or session) was shown — the same id within the
        same chain, never a namesake elsewhere — each note at most once per session."""
        if not isinstance(session, Session):
            raise TypeError(
                f"record_feedback takes the Session, not {type(session).__name__} {session!r}: "
                "a session id alone cannot say which tenant's session it is"
            )
        return await self.knowledge.record_feedback(
            history_scope(session, self.company_id), positive=positive, turn_id=turn_id
        )

    def _observed(self, session_id: str) -> tuple[Session | None, str]:
        """The one observed session with this id (forgotten now), or None and why not."""
        matches = [key for key in self._sessions if key.session_id == session_id]
        if len(matches) == 1:
            return self._sessions.pop(matches[0]), ""
        if not matches:
            return None, (
                f"session chain unknown: session {session_id!r} was never observed by this process; "
                "pass the Session to end_session"
            )
        return None, (
            f"session chain ambiguous: session {session_id!r} was observed under {len(matches)} tenant chains; "
            "pass the Session to end_session"
        )

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

