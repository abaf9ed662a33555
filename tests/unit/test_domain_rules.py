"""The note lifecycle, dedup, merge suggestions, the quality rules and task leases are
decided by the domain, so a backend that only stores, counts and compares-and-sets (the
naive in-memory stores below check nothing) cannot forget them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Sequence
from typing import Any
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import numpy as np
import pytest

from agentloop import LlmReply, LlmRequest, Scope
from agentloop.adapters import RecordingNotifier
from agentloop.adapters.embedders.hashing import HashingEmbedder
from agentloop.components import ToolExecution
from agentloop.notes.errors import InvalidNoteTransitionError
from agentloop.tasks.errors import ClaimLostError, InvalidTaskTransitionError
from agentloop.notes import (
    DistillationStatus,
    Distiller,
    KnowledgeBase,
    KnowledgeItem,
    Layer,
    LayerIds,
    MergeSuggestion,
    NoteStatus,
    NoteType,
    NoticeKind,
    Retrieval,
    Trajectory,
)
from agentloop.ports.knowledge import KnowledgeRepository
from agentloop.ports.tasks import TaskRecord, TaskState, TaskStore
from agentloop.ports.trajectories import TrajectoryStore
from agentloop.ports.vectors import Vectors
from agentloop.privacy import Subject
from agentloop.adapters import FileAttemptNotes
from agentloop.tasks import AttemptNotes, TaskLifecycle
from agentloop.testing import FakeClock
from agentloop.testing.notes import make_executions

EMBEDDER = HashingEmbedder()
OWNER = LayerIds(org_id="o1", team_id="t1", project_id="p1")
AT = datetime(2026, 1, 1, tzinfo=UTC)


class NaiveKnowledgeRepository:
    """Answers queries as the port says (statuses, visible owners, threshold, order, k),
    stores what it is given and moves any status it is asked to: no lifecycle, no rules."""

    def __init__(self) -> None:
        self.notes: dict[int, KnowledgeItem] = {}
        self.seen: list[tuple[int, Scope | None, str | None]] = []
        self.credited: set[tuple[int, Scope]] = set()
        self.suggestions: dict[tuple[int, int], MergeSuggestion] = {}

    async def count(self) -> int:
        return len(self.notes)

    async def add_many(self, items: Sequence[KnowledgeItem]) -> list[int]:
        return [(await self.add(item)).key for item in items]

    async def add(self, item: KnowledgeItem) -> KnowledgeItem:
        stored = attrs.evolve(item, id=len(self.notes) + 1)
        self.notes[stored.key] = stored
        return stored

    async def get(self, note_id: int) -> KnowledgeItem:
        return self.notes[note_id]

    async def items(self, statuses: Collection[NoteStatus] | None = None) -> list[KnowledgeItem]:
        return [i for i in self.notes.values() if statuses is None or i.status in statuses]

    async def search(
        self, vector: Vectors, k: int, *, caller: LayerIds, layer: Layer, statuses: Collection[NoteStatus],
        min_similarity: float = 0.0,
    ) -> list[tuple[KnowledgeItem, float]]:
        owners = caller.visible_owners(layer)
        hits = [(i, _cosine(vector, i.embedding)) for i in self.notes.values() if i.status in statuses and i.layer_ids in owners]
        return sorted([h for h in hits if h[1] >= min_similarity], key=lambda h: -h[1])[:k]

    async def keyword_search(
        self, text: str, k: int, *, caller: LayerIds, layer: Layer, statuses: Collection[NoteStatus]
    ) -> list[tuple[KnowledgeItem, float]]:
        return []

    async def record_retrievals(
        self, note_ids: Sequence[int], query: str, session: Scope | None, at: datetime, turn_id: str | None = None
    ) -> list[KnowledgeItem]:
        self.seen += [(i, session, turn_id) for i in note_ids]
        return [self._bump(i, "retrieval_count") for i in note_ids]

    async def retrievals(self, note_id: int) -> list[Retrieval]:
        return []

    async def credit_session(self, session: Scope, at: datetime, turn_id: str | None = None) -> list[KnowledgeItem]:
        fresh = sorted({
            i for i, s, turn in self.seen
            if s == session and turn_id in (None, turn) and (i, session) not in self.credited
        })
        self.credited |= {(i, session) for i in fresh}
        return [self._bump(i, "usefulness_score") for i in fresh]

    async def add_reference(self, note_id: int, at: datetime) -> KnowledgeItem:
        return self._bump(note_id, "reference_count")

    async def set_flag(self, note_id: int, flagged: bool, at: datetime) -> KnowledgeItem:
        self.notes[note_id] = attrs.evolve(self.notes[note_id], flagged_for_review=flagged)
        return self.notes[note_id]

    async def set_status(self, note_id: int, expected: NoteStatus, target: NoteStatus, at: datetime) -> KnowledgeItem | None:
        if self.notes[note_id].status is not expected:
            return None
        self.notes[note_id] = attrs.evolve(self.notes[note_id], status=target)
        return self.notes[note_id]

    async def add_merge_suggestion(self, suggestion: MergeSuggestion) -> bool:
        pair = (suggestion.first_id, suggestion.second_id)
        return self.suggestions.setdefault(pair, suggestion) is suggestion

    async def merge_suggestions(self) -> list[MergeSuggestion]:
        return list(self.suggestions.values())

    def _bump(self, note_id: int, counter: str) -> KnowledgeItem:
        item = self.notes[note_id]
        self.notes[note_id] = attrs.evolve(item, **{counter: getattr(item, counter) + 1})
        return self.notes[note_id]

    async def erase(self, subject: Subject) -> int:
        return sum(self.notes.pop(note_id, None) is not None for note_id in subject.notes)

    async def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        for note_id in sorted(subject.notes & set(self.notes)):
            yield {"kind": "note", "id": note_id, "markdown": self.notes[note_id].markdown}


class NaiveTrajectoryStore:
    """Executions and distilled keys in memory."""

    def __init__(self) -> None:
        self.executions: dict[str, ToolExecution] = {}
        self.distilled: set[str] = set()

    async def append(self, executions: Sequence[ToolExecution]) -> None:
        self.executions.update({e.id: e for e in executions})

    async def load(self, session_id: str, scope: Scope | None = None) -> Trajectory:
        return Trajectory(session_id, tuple(e for e in self.executions.values() if e.session_id == session_id))

    async def quarantined(self) -> list[dict[str, str]]:
        return []

    async def quarantine(self, execution: ToolExecution, reason: str) -> None:
        self.executions.pop(execution.id, None)

    async def count(self) -> int:
        return len(self.executions)

    async def mark_distilled(self, trajectory_hash: str, session_id: str, note_id: int, at: datetime) -> None:
        self.distilled.add(trajectory_hash)

    async def is_distilled(self, trajectory_hash: str) -> bool:
        return trajectory_hash in self.distilled

    def _held(self, subject: Subject) -> list[ToolExecution]:
        return [e for e in self.executions.values() if subject.matches(Scope(e.company_id, e.org_id, e.team_id, e.project_id, e.user_id, e.session_id))]

    async def erase(self, subject: Subject) -> int:
        held = self._held(subject)
        for execution in held:
            del self.executions[execution.id]
        return len(held)

    async def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        for execution in self._held(subject):
            yield {"kind": "execution", "id": execution.id, "session_id": execution.session_id}


class NaiveTaskStore:
    """Tasks in a dict; `move` compares and sets exactly the conditions it is given."""

    def __init__(self) -> None:
        self.tasks: dict[str, TaskRecord] = {}

    async def add(self, record: TaskRecord) -> None:
        self.tasks[record.id] = record

    async def get(self, task_id: str, scope: Scope) -> TaskRecord | None:
        record = self.tasks.get(task_id)
        return record if record is not None and record.scope == scope else None

    async def move(
        self, task_id: str, scope: Scope, allowed_from: tuple[TaskState, ...], to: TaskState, *,
        updated_at: datetime, claimed_by: str | None, count_attempt: bool = False,
        lease_expires_at: datetime | None = None, held_by: str | None = None, unchanged_since: datetime | None = None,
    ) -> TaskRecord | None:
        record = await self.get(task_id, scope)
        if (
            record is None
            or record.state not in allowed_from
            or (held_by is not None and record.claimed_by != held_by)
            or (unchanged_since is not None and record.updated_at != unchanged_since)
        ):
            return None
        self.tasks[task_id] = attrs.evolve(
            record, state=to, updated_at=updated_at, claimed_by=claimed_by,
            attempts=record.attempts + int(count_attempt), lease_expires_at=lease_expires_at,
        )
        return self.tasks[task_id]

    async def in_state(self, state: TaskState, scope: Scope) -> tuple[TaskRecord, ...]:
        return tuple(r for r in self.tasks.values() if r.state is state and r.scope == scope)

    async def erase(self, subject: Subject) -> int:
        held = [task_id for task_id, record in self.tasks.items() if subject.matches(record.chain)]
        for task_id in held:
            del self.tasks[task_id]
        return len(held)

    async def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        for record in [r for r in self.tasks.values() if subject.matches(r.chain)]:
            yield {"kind": "task", "id": record.id}


def _cosine(a: Vectors, b: Vectors) -> float:
    norms = float(np.linalg.norm(a)) * float(np.linalg.norm(b))
    return float(np.dot(a, b)) / norms if norms > 0 else 0.0


def _note(text: str, owner: LayerIds = OWNER) -> KnowledgeItem:
    return KnowledgeItem(NoteType.PATTERN, Layer.PROJECT, owner, text, text, EMBEDDER.embed([text])[0], AT)


def _knowledge(repository: KnowledgeRepository | None = None) -> tuple[KnowledgeBase, RecordingNotifier]:
    notifier = RecordingNotifier()
    return KnowledgeBase(NaiveKnowledgeRepository() if repository is None else repository, EMBEDDER, notifier=notifier, clock=FakeClock()), notifier


def test_the_naive_stores_are_backends_of_the_ports() -> None:
    assert isinstance(NaiveKnowledgeRepository(), KnowledgeRepository)
    assert isinstance(NaiveTrajectoryStore(), TrajectoryStore)
    assert isinstance(NaiveTaskStore(), TaskStore)


def test_the_lifecycle_refuses_a_move_the_store_would_make() -> None:
    knowledge, _ = _knowledge()
    note = asyncio.run(knowledge.add(_note("retry the upload with backoff")))
    with pytest.raises(InvalidNoteTransitionError, match="from draft it may go to proposed, rejected"):
        asyncio.run(knowledge.transition(note.key, NoteStatus.ACCEPTED))
    assert asyncio.run(knowledge.get(note.key)).status is NoteStatus.DRAFT
    asyncio.run(knowledge.transition(note.key, NoteStatus.PROPOSED))
    assert asyncio.run(knowledge.transition(note.key, NoteStatus.ACCEPTED)).status is NoteStatus.ACCEPTED
    with pytest.raises(InvalidNoteTransitionError, match="cannot go from accepted to draft"):
        asyncio.run(knowledge.transition(note.key, NoteStatus.DRAFT))


class RacingRepository(NaiveKnowledgeRepository):
    """Another writer moves the note to `meanwhile` just before the first status set."""

    def __init__(self, meanwhile: NoteStatus) -> None:
        super().__init__()
        self.meanwhile: NoteStatus | None = meanwhile

    async def set_status(self, note_id: int, expected: NoteStatus, target: NoteStatus, at: datetime) -> KnowledgeItem | None:
        if self.meanwhile is not None:
            self.notes[note_id] = attrs.evolve(self.notes[note_id], status=self.meanwhile)
            self.meanwhile = None
        return await super().set_status(note_id, expected, target, at)


def test_a_move_that_lost_a_race_is_judged_again_from_where_the_note_went() -> None:
    knowledge, _ = _knowledge(RacingRepository(meanwhile=NoteStatus.REJECTED))
    note = asyncio.run(knowledge.add(_note("rotate the token")))
    with pytest.raises(InvalidNoteTransitionError, match="cannot go from rejected to proposed"):
        asyncio.run(knowledge.transition(note.key, NoteStatus.PROPOSED))
    knowledge, _ = _knowledge(RacingRepository(meanwhile=NoteStatus.PROPOSED))
    note = asyncio.run(knowledge.add(_note("rotate the token")))
    assert asyncio.run(knowledge.transition(note.key, NoteStatus.REJECTED)).status is NoteStatus.REJECTED


def test_usage_flags_a_useless_note_and_proposes_a_useful_draft() -> None:
    knowledge, notifier = _knowledge()
    useless = asyncio.run(knowledge.add(_note("bake sourdough bread")))
    for _ in range(11):
        (found,) = asyncio.run(knowledge.retrieve("bake sourdough bread", OWNER, k=1))
    assert found.item.flagged_for_review and asyncio.run(knowledge.get(useless.key)).flagged_for_review
    useful = asyncio.run(knowledge.add(_note("invalidate session tokens on password change")))
    for n in range(6):
        session = Scope(session_id=f"s{n}")
        asyncio.run(knowledge.retrieve("invalidate session tokens on password change", OWNER, session=session, k=1))
        asyncio.run(knowledge.record_feedback(session, positive=True))
    assert asyncio.run(knowledge.get(useful.key)).status is NoteStatus.PROPOSED
    assert [n.kind for n in notifier.notices] == [NoticeKind.NOTE_FLAGGED, NoticeKind.NOTE_PROPOSED]


def test_accepting_similar_notes_suggests_a_merge_once() -> None:
    knowledge, notifier = _knowledge()
    a = asyncio.run(knowledge.add(_note("retry network calls with backoff")))
    b = asyncio.run(knowledge.add(_note("retry network calls with backoff")))
    c = asyncio.run(knowledge.add(_note("bake sourdough bread")))
    for note in (a, b, c):
        asyncio.run(knowledge.transition(note.key, NoteStatus.PROPOSED))
        asyncio.run(knowledge.transition(note.key, NoteStatus.ACCEPTED))
    assert [(s.first_id, s.second_id) for s in asyncio.run(knowledge.merge_suggestions())] == [(a.key, b.key)]
    assert [n.kind for n in notifier.notices] == [NoticeKind.MERGE_SUGGESTED]


class Model:
    async def complete(self, request: LlmRequest) -> LlmReply:
        return LlmReply(
            content="## Context\nLogins failed.\n\n## Solution\nInvalidate old tokens.\n\n## Key Patterns\nVersion the credentials.",
            model="m",
        )


def test_a_distilled_duplicate_is_referenced_not_stored_again() -> None:
    knowledge, _ = _knowledge()
    distiller = Distiller(Model(), knowledge, NaiveTrajectoryStore())
    work = [("s1", ["search", "read", "fix"]), ("s2", ["search", "read", "fix", "test"])]
    results = [
        asyncio.run(distiller.distill(Trajectory(s, tuple(make_executions(tools, session_id=s, every_s=20))), success=True, owner=OWNER))
        for s, tools in work
    ]
    assert [r.status for r in results] == [DistillationStatus.STORED, DistillationStatus.DUPLICATE]
    assert asyncio.run(knowledge.repository.count()) == 1 and asyncio.run(knowledge.get(1)).reference_count == 1


def test_task_moves_and_leases_hold_over_a_store_that_only_compares_and_sets(tmp_path: Path) -> None:
    clock = FakeClock()
    lifecycle = TaskLifecycle(NaiveTaskStore(), AttemptNotes(FileAttemptNotes(tmp_path), clock=clock), clock=clock, lease=timedelta(minutes=1))
    asyncio.run(lifecycle.create("t1", "fix"))
    asyncio.run(lifecycle.claim("t1", "agent-1"))
    with pytest.raises(InvalidTaskTransitionError):
        asyncio.run(lifecycle.accept("t1"))
    clock.advance(61)
    assert [r.id for r in asyncio.run(lifecycle.expire_leases())] == ["t1"]
    with pytest.raises(ClaimLostError):
        asyncio.run(lifecycle.renew("t1", "agent-1"))
    assert asyncio.run(lifecycle.claim("t1", "agent-2")).attempts == 2
