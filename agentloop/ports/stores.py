"""The storage ports of a bot (session history, long-term memory, the RAG index) and `Stores`,
the bundle of every store of one bot that `open_stores` returns.

Every call is a coroutine, so a backend that waits on disk or a network does so off the
event loop that runs the turns. A bot's stores are called from several event loops, in
turn and at once (a script's `asyncio.run` calls, the capture writer's own loop), so a
backend does not bind its connections to one loop.

Every store keeps each row in the `Scope` it was written in and reads only the rows of
the scope it is asked for (`agentloop.scopes` says which scope a session uses).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import ExitStack
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

import attrs

from agentloop.messages import ChatMessage
from agentloop.ports.approvals import ApprovalStore
from agentloop.ports.audit import AuditLog
from agentloop.ports.attempt_notes import AttemptNotesStore
from agentloop.ports.knowledge import KnowledgeRepository
from agentloop.ports.summaries import SummaryStore
from agentloop.ports.tasks import TaskStore
from agentloop.ports.trajectories import TrajectoryStore
from agentloop.ports.usage import UsageStore
from agentloop.ports.vectors import Embedder
from agentloop.privacy import Erased, Subject, erase_subject, export_subject
from agentloop.retrieval import HybridWeights
from agentloop.scopes import Scope


@attrs.frozen
class MemoryEntry:
    """One remembered exchange: what the user said and the canonical answer, in the
    memory scope of the session `session_id` that had it."""

    scope: Scope
    session_id: str
    user_text: str
    assistant_text: str
    created_at: datetime


@attrs.frozen
class RagHit:
    """A stored text found by a similarity search; `score` is the cosine similarity."""

    id: int
    text: str
    score: float
    scope: Scope


@runtime_checkable
class SessionStore(Protocol):
    """The conversation history of each session (its history scope), oldest message first."""

    async def append(self, scope: Scope, messages: Sequence[ChatMessage], *, key: str | None = None) -> bool:
        """Add `messages` at the end of the history of `scope`, atomically; True.

        With a `key` (a message id) already applied to this scope, nothing is appended and
        the answer is False: a turn run again after a crash writes its history once."""
        ...

    async def recent(self, scope: Scope, limit: int) -> tuple[ChatMessage, ...]:
        """The last `limit` messages of `scope`, oldest first."""
        ...

    async def count(self, scope: Scope) -> int:
        """How many messages the history of `scope` holds (a message's position is its place in that count)."""
        ...

    async def erase(self, subject: Subject) -> int:
        """Remove every row of `subject` (`agentloop.privacy`) in one transaction; how many (0 when run again)."""
        ...

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        """Every row kept about `subject`, one JSON-ready record at a time (docs/privacy.md gives each shape)."""
        ...


@runtime_checkable
class MemoryStore(Protocol):
    """What a bot remembers about a scope (a user) across sessions."""

    async def add(self, entry: MemoryEntry, *, key: str | None = None) -> None:
        """Remember `entry` in its scope.

        With a `key` already added in `entry.scope`, nothing is stored: a turn run again
        after a failed write stores its memory entry once."""
        ...

    async def recent(self, scope: Scope, limit: int, *, exclude_session: str | None = None) -> tuple[MemoryEntry, ...]:
        """The last `limit` entries of `scope`, oldest first, optionally without one session's."""
        ...

    async def erase(self, subject: Subject) -> int:
        """Remove every row of `subject` (`agentloop.privacy`) in one transaction; how many (0 when run again)."""
        ...

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        """Every row kept about `subject`, one JSON-ready record at a time (docs/privacy.md gives each shape)."""
        ...


@runtime_checkable
class RagStore(Protocol):
    """Texts indexed for retrieval by meaning, each within one scope."""

    async def add(self, scope: Scope, text: str, *, session_id: str | None = None) -> int:
        """Store and index `text`; returns its id. A text already stored in `scope` is not
        stored again: its id is returned (storage idempotence, so a retried write is harmless)."""
        ...

    async def search(self, scope: Scope, query: str, k: int) -> list[RagHit]:
        """Up to `k` texts of `scope` best for `query`, best first, each with its cosine
        similarity: the texts nearest in meaning fused with those holding its words (hybrid
        retrieval, `agentloop.retrieval.HybridWeights`), so a text quoting an identifier of
        the query is found even when vectors rank it low. A query with no letter or digit finds nothing."""
        ...

    async def texts(self, scope: Scope) -> list[str]:
        """Every text stored in `scope`, oldest first (to review or export what a bot indexed)."""
        ...

    async def count(self) -> int:
        """How many texts are stored, in every scope."""
        ...

    async def erase(self, subject: Subject) -> int:
        """Remove every row of `subject` (`agentloop.privacy`) in one transaction; how many (0 when run again)."""
        ...

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        """Every row kept about `subject`, one JSON-ready record at a time (docs/privacy.md gives each shape)."""
        ...


@attrs.define(eq=False)
class Stores:
    """The stores of one bot, each typed as its port, and how to close them all.

    The stores' calls are coroutines (await them); opening and closing are not, so a
    `with` block or `close()` works inside or outside an event loop.
    Close with `close()` or `with`; closing twice does nothing.
    """

    url: str
    bot: str
    embedder: Embedder
    sessions: SessionStore
    memory: MemoryStore
    rag: RagStore
    knowledge: KnowledgeRepository
    trajectories: TrajectoryStore
    tasks: TaskStore
    attempt_notes: AttemptNotesStore
    approvals: ApprovalStore
    usage: UsageStore
    _closers: tuple[Callable[[], None], ...] = ()
    summaries: SummaryStore = attrs.field(kw_only=True)
    """Each session's compacted history (`agentloop.compaction`)."""
    hybrid: HybridWeights = HybridWeights()
    """How the RAG search weighs vectors and keywords, and note search by default (`open_note_taking`)."""
    audit: AuditLog = attrs.field(kw_only=True)
    """The record of every erase and export (`agentloop.privacy.AuditRecord`)."""
    _closed: bool = attrs.field(default=False, init=False)

    async def erase(self, subject: Subject, *, actor: str) -> Erased:
        """Remove every row of `subject` from every store, each store in one transaction, and
        audit it as done by `actor`; the rows removed per store (`agentloop.privacy.erase_subject`)."""
        return await erase_subject(self, subject, actor=actor)

    def export(self, subject: Subject, *, actor: str) -> AsyncIterator[dict[str, Any]]:
        """Every row kept about `subject`, store by store, one record at a time, audited as
        asked by `actor` (`agentloop.privacy.export_subject`)."""
        return export_subject(self, subject, actor=actor)

    def close(self) -> None:
        """Close every store, last opened first (saving the indexes), even if closing one fails."""
        if self._closed:
            return
        self._closed = True
        with ExitStack() as closing:
            for close in self._closers:
                closing.callback(close)

    def __enter__(self) -> Stores:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
