"""A tiny in-memory storage backend: dicts and exact cosine search, one class per port.

It exists to show that a backend needs nothing but its `open_backend` fixture to run the
conformance suite (`agentloop.testing.stores`). Its "database" is a `MemoryData`, which
outlives the `Stores` opened on it, so closing and opening again finds the same rows.
Every rule about what should be stored is the domain's (`LayerIds.visible_owners`,
`quarantine_record`); this only stores, filters, counts and compares-and-sets.
"""

from __future__ import annotations

import itertools
import math
import re
import threading
from collections.abc import AsyncIterator, Collection, Sequence
from typing import Any
from datetime import datetime

import attrs
import numpy as np

from agentloop.adapters.embedders.hashing import HashingEmbedder
from agentloop.adapters.summaries import InMemorySummaryStore
from agentloop.adapters.usage import MemoryUsageStore
from agentloop.approvals import PendingApproval
from agentloop.ports import Stores
from agentloop.components import ToolExecution
from agentloop.adapters.errors import EmbedderMismatchError
from agentloop.notes.errors import UnknownNoteError
from agentloop.messages import ChatMessage
from agentloop.notes import KnowledgeItem, Layer, LayerIds, MergeSuggestion, NoteStatus, Retrieval, Trajectory, quarantine_record
from agentloop.ports import Embedder, MemoryEntry, RagHit, TaskRecord, TaskState, Vectors
from agentloop.retrieval import HybridWeights, fuse, query_words
from agentloop.scopes import Scope
from agentloop.adapters.audit import MemoryAuditLog
from agentloop.privacy import Subject, SubjectKind, scope_record


def held(subject: Subject, scope: Scope, session_id: str | None) -> bool:
    """Whether a row of `scope`, written by session `session_id` that it keeps apart, is the subject's
    (as the SQL stores' `session_column` clause says)."""
    unnamed = subject.kind is not SubjectKind.USER or scope.user_id is None
    owned = session_id is not None and session_id in subject.sessions and subject.in_chain(scope.company_id, scope.org_id)
    return subject.matches(scope) or (unnamed and owned)


def cosine(a: Vectors, b: Vectors) -> float:
    norms = float(np.linalg.norm(a)) * float(np.linalg.norm(b))
    return float(np.dot(a, b)) / norms if norms > 0 else 0.0


def _tokens(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", text.casefold())


def keyword_ranking(query: str, texts: dict[int, str]) -> list[tuple[int, float]]:
    """The ids of `texts` holding words of `query` (each word's tokens in a row) with their
    score, rarest words counting most (an IDF sum), best first."""
    documents = {id_: " " + " ".join(_tokens(text)) + " " for id_, text in texts.items()}
    scores: dict[int, float] = {}
    for word in query_words(query):
        phrase = " " + " ".join(_tokens(word)) + " "
        holding = [id_ for id_, document in documents.items() if phrase.strip() and phrase in document]
        for id_ in holding:
            scores[id_] = scores.get(id_, 0.0) + math.log(1 + len(documents) / len(holding))
    return sorted(scores.items(), key=lambda scored: (-scored[1], scored[0]))


@attrs.define
class MemoryData:
    """Every row of one bot, guarded by one lock (threads write at once)."""

    lock: threading.Lock = attrs.field(factory=threading.Lock)
    ids: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))
    history: list[tuple[Scope, ChatMessage]] = attrs.Factory(list)
    history_keys: set[tuple[Scope, str]] = attrs.Factory(set)
    memory: list[MemoryEntry] = attrs.Factory(list)
    memory_keys: set[tuple[Scope, str]] = attrs.Factory(set)
    rag: dict[int, tuple[Scope, str, Vectors]] = attrs.Factory(dict)
    notes: dict[int, KnowledgeItem] = attrs.Factory(dict)
    retrievals: list[Retrieval] = attrs.Factory(list)
    credited: set[tuple[int, Scope]] = attrs.Factory(set)
    suggestions: dict[tuple[int, int], MergeSuggestion] = attrs.Factory(dict)
    executions: dict[str, ToolExecution] = attrs.Factory(dict)
    quarantined: list[dict[str, str]] = attrs.Factory(list)
    distilled: dict[str, tuple[str, int]] = attrs.Factory(dict)
    rag_sessions: dict[int, str | None] = attrs.Factory(dict)
    audit: MemoryAuditLog = attrs.Factory(MemoryAuditLog)
    tasks: dict[str, TaskRecord] = attrs.Factory(dict)
    attempt_notes: dict[str, str] = attrs.Factory(dict)
    approvals: dict[str, tuple[PendingApproval, tuple[bool, str | None] | None]] = attrs.Factory(dict)
    usage: MemoryUsageStore = attrs.Factory(MemoryUsageStore)
    """agentloop's own in-memory usage store, kept here so a reopen finds its rows."""
    """Each approval by id, with its decision (None while undecided); insertion order is age."""
    summaries: InMemorySummaryStore = attrs.Factory(InMemorySummaryStore)
    embedder: tuple[str, int] | None = None
    """The (name, dim) of the embedder that built the vectors, recorded by the first open."""


class MemorySessionStore:
    def __init__(self, data: MemoryData) -> None:
        self.data = data

    async def append(self, scope: Scope, messages: Sequence[ChatMessage], *, key: str | None = None) -> bool:
        with self.data.lock:
            if key is not None:
                if (scope, key) in self.data.history_keys:
                    return False
                self.data.history_keys.add((scope, key))
            self.data.history.extend((scope, message) for message in messages)
        return True

    async def recent(self, scope: Scope, limit: int) -> tuple[ChatMessage, ...]:
        with self.data.lock:
            mine = [message for owner, message in self.data.history if owner == scope]
        return tuple(mine[-limit:]) if limit > 0 else ()

    async def count(self, scope: Scope) -> int:
        with self.data.lock:
            return sum(owner == scope for owner, _ in self.data.history)

    async def erase(self, subject: Subject) -> int:
        with self.data.lock:
            kept = [(owner, message) for owner, message in self.data.history if not subject.matches(owner)]
            removed = len(self.data.history) - len(kept)
            self.data.history[:] = kept
            self.data.history_keys = {(owner, key) for owner, key in self.data.history_keys if not subject.matches(owner)}
        return removed

    async def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        with self.data.lock:
            found = [(owner, message) for owner, message in self.data.history if subject.matches(owner)]
        for owner, message in found:
            yield {"kind": "message", "scope": scope_record(owner), "role": message.role.value, "content": message.content}


class MemoryMemoryStore:
    def __init__(self, data: MemoryData) -> None:
        self.data = data

    async def add(self, entry: MemoryEntry, *, key: str | None = None) -> None:
        with self.data.lock:
            if key is not None:
                if (entry.scope, key) in self.data.memory_keys:
                    return
                self.data.memory_keys.add((entry.scope, key))
            self.data.memory.append(entry)

    async def recent(self, scope: Scope, limit: int, *, exclude_session: str | None = None) -> tuple[MemoryEntry, ...]:
        with self.data.lock:
            mine = [e for e in self.data.memory if e.scope == scope and e.session_id != exclude_session]
        return tuple(mine[-limit:]) if limit > 0 else ()

    async def erase(self, subject: Subject) -> int:
        with self.data.lock:
            kept = [e for e in self.data.memory if not held(subject, e.scope, e.session_id)]
            removed = len(self.data.memory) - len(kept)
            self.data.memory[:] = kept
        return removed

    async def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        with self.data.lock:
            found = [e for e in self.data.memory if held(subject, e.scope, e.session_id)]
        for e in found:
            yield {"kind": "entry", "scope": scope_record(e.scope), "session_id": e.session_id, "user_text": e.user_text,
                   "assistant_text": e.assistant_text, "created_at": e.created_at.isoformat()}


class MemoryRagStore:
    def __init__(self, data: MemoryData, embedder: Embedder) -> None:
        self.data = data
        self.embedder = embedder

    async def add(self, scope: Scope, text: str, *, session_id: str | None = None) -> int:
        vector = (await self.embedder.aembed([text]))[0]
        with self.data.lock:
            for id_, (owner, stored, _) in self.data.rag.items():
                if owner == scope and stored == text:
                    return id_
            id_ = next(self.data.ids)
            self.data.rag[id_] = (scope, text, vector)
            self.data.rag_sessions[id_] = session_id
        return id_

    async def search(self, scope: Scope, query: str, k: int) -> list[RagHit]:
        vector = (await self.embedder.aembed([query]))[0]
        if k <= 0:
            return []
        weights = HybridWeights()
        with self.data.lock:
            hits = {
                id_: RagHit(id_, text, cosine(vector, stored), owner)
                for id_, (owner, text, stored) in self.data.rag.items() if owner == scope
            }
        nearest = sorted(((id_, hit.score) for id_, hit in hits.items()), key=lambda scored: -scored[1])
        nearest = nearest[: weights.per_side(k)] if vector.any() else []
        keyword = keyword_ranking(query, {id_: hit.text for id_, hit in hits.items()})[: weights.per_side(k)]
        return [hits[id_] for id_, _ in fuse(nearest, keyword, weights)[:k]]

    async def count(self) -> int:
        return len(self.data.rag)

    def _held(self, subject: Subject) -> list[int]:
        return [i for i, (owner, _, _) in self.data.rag.items() if held(subject, owner, self.data.rag_sessions.get(i))]

    async def erase(self, subject: Subject) -> int:
        with self.data.lock:
            gone = self._held(subject)
            for i in gone:
                del self.data.rag[i]
        return len(gone)

    async def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        with self.data.lock:
            found = [(i, *self.data.rag[i][:2]) for i in self._held(subject)]
        for i, owner, text in found:
            yield {"kind": "text", "scope": scope_record(owner), "id": i, "session_id": self.data.rag_sessions.get(i), "text": text}

    async def texts(self, scope: Scope) -> list[str]:
        with self.data.lock:
            return [text for owner, text, _ in self.data.rag.values() if owner == scope]


class MemoryKnowledgeRepository:
    def __init__(self, data: MemoryData, dim: int) -> None:
        self.data = data
        self.dim = dim

    async def count(self) -> int:
        return len(self.data.notes)

    async def add(self, item: KnowledgeItem) -> KnowledgeItem:
        (note_id,) = await self.add_many([item])
        return self.data.notes[note_id]

    async def add_many(self, items: Sequence[KnowledgeItem]) -> list[int]:
        for item in items:
            if item.id is not None:
                raise ValueError(f"item {item.id} is already stored; add() takes new items (id None)")
            if item.embedding.shape != (self.dim,):
                raise ValueError(f"the embedding has shape {item.embedding.shape}, but this repository holds dim {self.dim}")
        with self.data.lock:
            ids = [next(self.data.ids) for _ in items]
            self.data.notes.update((i, attrs.evolve(item, id=i)) for i, item in zip(ids, items, strict=True))
        return ids

    async def get(self, note_id: int) -> KnowledgeItem:
        with self.data.lock:
            return self._get(note_id)

    async def items(self, statuses: Collection[NoteStatus] | None = None) -> list[KnowledgeItem]:
        with self.data.lock:
            return [item for _, item in sorted(self.data.notes.items()) if statuses is None or item.status in statuses]

    async def search(
        self, vector: Vectors, k: int, *, caller: LayerIds, layer: Layer, statuses: Collection[NoteStatus],
        min_similarity: float = 0.0,
    ) -> list[tuple[KnowledgeItem, float]]:
        owners = caller.visible_owners(layer)
        with self.data.lock:
            hits = [(item, cosine(vector, item.embedding)) for item in self.data.notes.values()
                    if item.status in statuses and item.layer_ids in owners]
        return sorted([hit for hit in hits if hit[1] >= min_similarity], key=lambda hit: -hit[1])[: max(k, 0)]

    async def keyword_search(
        self, text: str, k: int, *, caller: LayerIds, layer: Layer, statuses: Collection[NoteStatus]
    ) -> list[tuple[KnowledgeItem, float]]:
        owners = caller.visible_owners(layer)
        with self.data.lock:
            visible = {i: item for i, item in self.data.notes.items() if item.status in statuses and item.layer_ids in owners}
        ranking = keyword_ranking(text, {i: f"{item.title}\n{item.markdown}" for i, item in visible.items()})
        return [(visible[i], score) for i, score in ranking[: max(k, 0)]]

    async def record_retrievals(
        self, note_ids: Sequence[int], query: str, session: Scope | None, at: datetime, turn_id: str | None = None
    ) -> list[KnowledgeItem]:
        with self.data.lock:
            for note_id in note_ids:
                self._get(note_id)
            session_id = None if session is None else session.session_id
            self.data.retrievals += [Retrieval(i, query, session_id, at, session, turn_id) for i in note_ids]
            return [self._bump(i, at, retrieval_count=1) for i in note_ids]

    async def retrievals(self, note_id: int) -> list[Retrieval]:
        with self.data.lock:
            self._get(note_id)
            return [r for r in self.data.retrievals if r.note_id == note_id]

    async def credit_session(self, session: Scope, at: datetime, turn_id: str | None = None) -> list[KnowledgeItem]:
        with self.data.lock:
            shown = sorted({
                r.note_id for r in self.data.retrievals
                if r.session == session and (turn_id is None or r.turn_id == turn_id)
            } - {
                note_id for note_id, credited in self.data.credited if credited == session
            })
            self.data.credited |= {(note_id, session) for note_id in shown}
            return [self._bump(note_id, at, usefulness_score=1) for note_id in shown]

    async def add_reference(self, note_id: int, at: datetime) -> KnowledgeItem:
        with self.data.lock:
            return self._bump(note_id, at, reference_count=1)

    async def set_flag(self, note_id: int, flagged: bool, at: datetime) -> KnowledgeItem:
        with self.data.lock:
            return self._set(note_id, at, flagged_for_review=flagged)

    async def set_status(self, note_id: int, expected: NoteStatus, target: NoteStatus, at: datetime) -> KnowledgeItem | None:
        with self.data.lock:
            if self._get(note_id).status is not expected:
                return None
            return self._set(note_id, at, status=target)

    async def add_merge_suggestion(self, suggestion: MergeSuggestion) -> bool:
        with self.data.lock:
            pair = (suggestion.first_id, suggestion.second_id)
            if pair in self.data.suggestions:
                return False
            self.data.suggestions[pair] = suggestion
            return True

    async def merge_suggestions(self) -> list[MergeSuggestion]:
        with self.data.lock:
            return list(self.data.suggestions.values())

    def _get(self, note_id: int) -> KnowledgeItem:
        if note_id not in self.data.notes:
            raise UnknownNoteError(note_id)
        return self.data.notes[note_id]

    def _set(self, note_id: int, at: datetime, **changes: object) -> KnowledgeItem:
        self.data.notes[note_id] = attrs.evolve(self._get(note_id), updated_at=at, **changes)
        return self.data.notes[note_id]

    def _bump(self, note_id: int, at: datetime, **counters: int) -> KnowledgeItem:
        item = self._get(note_id)
        return self._set(note_id, at, **{name: getattr(item, name) + by for name, by in counters.items()})

    def _retrieval_held(self, subject: Subject, r: Retrieval) -> bool:
        return r.note_id in subject.notes or (r.session is not None and subject.matches(r.session))

    @staticmethod
    def _ours(subject: Subject, note: KnowledgeItem) -> bool:
        """A note of the subject's company and org (its sessions' notes may share ids with another tenant's)."""
        return note.layer_ids.company_id == subject.company_id and note.layer_ids.org_id == subject.org_id

    async def erase(self, subject: Subject) -> int:
        with self.data.lock:
            kept = [r for r in self.data.retrievals if not self._retrieval_held(subject, r)]
            removed = len(self.data.retrievals) - len(kept)
            self.data.retrievals[:] = kept
            credited = {(i, s) for i, s in self.data.credited if i not in subject.notes and not subject.matches(s)}
            removed += len(self.data.credited) - len(credited)
            self.data.credited = credited
            for pair in [pair for pair in self.data.suggestions if set(pair) & subject.notes]:
                removed += self.data.suggestions.pop(pair) is not None
            for note_id in subject.notes:
                removed += self.data.notes.pop(note_id, None) is not None
        return removed

    async def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        with self.data.lock:
            retrievals = [r for r in self.data.retrievals if self._retrieval_held(subject, r)]
            notes = [self.data.notes[i] for i in sorted(subject.notes) if i in self.data.notes and self._ours(subject, self.data.notes[i])]
        for r in retrievals:
            yield {"kind": "retrieval", "note_id": r.note_id, "query": r.query, "session_id": r.session_id, "at": r.at.isoformat()}
        for note in notes:
            yield {"kind": "note", "id": note.id, "title": note.title, "markdown": note.markdown, "status": note.status.value}


class MemoryTrajectoryStore:
    def __init__(self, data: MemoryData) -> None:
        self.data = data

    async def append(self, executions: Sequence[ToolExecution]) -> None:
        with self.data.lock:
            for execution in executions:
                self.data.executions.setdefault(execution.id, execution)

    async def load(self, session_id: str, scope: Scope | None = None) -> Trajectory:
        with self.data.lock:
            found = [e for e in self.data.executions.values() if e.session_id == session_id]
        if scope is not None:
            chain = (scope.company_id, scope.org_id, scope.team_id, scope.project_id, scope.user_id)
            found = [e for e in found if (e.company_id, e.org_id, e.team_id, e.project_id, e.user_id) == chain]
        return Trajectory(session_id, tuple(sorted(found, key=lambda e: e.started_at)))

    async def quarantine(self, execution: ToolExecution, reason: str) -> None:
        with self.data.lock:
            self.data.quarantined.append(quarantine_record(execution, reason))

    async def quarantined(self) -> list[dict[str, str]]:
        with self.data.lock:
            return list(self.data.quarantined)

    async def count(self) -> int:
        return len(self.data.executions)

    async def mark_distilled(self, trajectory_hash: str, session_id: str, note_id: int, at: datetime) -> None:
        with self.data.lock:
            self.data.distilled.setdefault(trajectory_hash, (session_id, note_id))

    async def is_distilled(self, trajectory_hash: str) -> bool:
        return trajectory_hash in self.data.distilled

    def _held(self, subject: Subject, e: ToolExecution) -> bool:
        return subject.matches(Scope(e.company_id, e.org_id, e.team_id, e.project_id, e.user_id, e.session_id))

    async def erase(self, subject: Subject) -> int:
        with self.data.lock:
            gone = [i for i, e in self.data.executions.items() if self._held(subject, e)]
            for i in gone:
                del self.data.executions[i]
            hashes = [h for h, (session, note) in self.data.distilled.items() if session in subject.sessions or note in subject.notes]
            for h in hashes:
                del self.data.distilled[h]
            kept = [q for q in self.data.quarantined if q["session_id"] not in subject.sessions]
            removed = len(gone) + len(hashes) + len(self.data.quarantined) - len(kept)
            self.data.quarantined[:] = kept
        return removed

    async def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        with self.data.lock:
            executions = [e for e in self.data.executions.values() if self._held(subject, e)]
            distilled = [(h, s, n) for h, (s, n) in self.data.distilled.items() if s in subject.sessions]
        for e in executions:
            yield {"kind": "execution", "id": e.id, "session_id": e.session_id, "user_id": e.user_id, "tool_name": e.tool_name,
                   "arguments": e.arguments, "result": e.result, "error": e.error}
        for h, session, note in distilled:
            yield {"kind": "distilled", "hash": h, "session_id": session, "note_id": note}


class MemoryTaskStore:
    def __init__(self, data: MemoryData) -> None:
        self.data = data

    async def add(self, record: TaskRecord) -> None:
        with self.data.lock:
            if self.data.tasks.setdefault(record.id, record) is not record:
                raise ValueError(f"a task with id {record.id!r} already exists")

    async def get(self, task_id: str, scope: Scope) -> TaskRecord | None:
        record = self.data.tasks.get(task_id)
        return record if record is not None and record.scope == scope else None

    async def move(
        self, task_id: str, scope: Scope, allowed_from: tuple[TaskState, ...], to: TaskState, *,
        updated_at: datetime, claimed_by: str | None, count_attempt: bool = False,
        lease_expires_at: datetime | None = None, held_by: str | None = None, unchanged_since: datetime | None = None,
    ) -> TaskRecord | None:
        with self.data.lock:
            record = await self.get(task_id, scope)
            if (
                record is None
                or record.state not in allowed_from
                or (held_by is not None and record.claimed_by != held_by)
                or (unchanged_since is not None and record.updated_at != unchanged_since)
            ):
                return None
            self.data.tasks[task_id] = attrs.evolve(
                record, state=to, updated_at=updated_at, claimed_by=claimed_by,
                attempts=record.attempts + int(count_attempt), lease_expires_at=lease_expires_at,
            )
            return self.data.tasks[task_id]

    async def in_state(self, state: TaskState, scope: Scope) -> tuple[TaskRecord, ...]:
        with self.data.lock:
            return tuple(r for r in self.data.tasks.values() if r.state is state and r.scope == scope)

    async def erase(self, subject: Subject) -> int:
        with self.data.lock:
            gone = [i for i, r in self.data.tasks.items() if subject.matches(r.chain)]
            for i in gone:
                del self.data.tasks[i]
        return len(gone)

    async def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        with self.data.lock:
            found = [r for r in self.data.tasks.values() if subject.matches(r.chain)]
        for r in found:
            yield {"kind": "task", "id": r.id, "template": r.template, "inputs": r.inputs, "state": r.state.value}


class MemoryAttemptNotes:
    def __init__(self, data: MemoryData) -> None:
        self.data = data

    async def read(self, task_id: str) -> str | None:
        return self.data.attempt_notes.get(task_id)

    async def append(self, task_id: str, text: str) -> None:
        with self.data.lock:
            self.data.attempt_notes[task_id] = self.data.attempt_notes.get(task_id, "") + text

    async def remove(self, task_id: str) -> bool:
        with self.data.lock:
            return self.data.attempt_notes.pop(task_id, None) is not None

    async def erase(self, subject: Subject) -> int:
        with self.data.lock:
            return sum(self.data.attempt_notes.pop(task_id, None) is not None for task_id in subject.tasks)

    async def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        with self.data.lock:
            found = [(t, self.data.attempt_notes[t]) for t in sorted(subject.tasks) if t in self.data.attempt_notes]
        for task_id, text in found:
            yield {"kind": "attempt_notes", "task_id": task_id, "text": text}


class MemoryApprovalStore:
    def __init__(self, data: MemoryData) -> None:
        self.data = data

    async def add(self, pending: PendingApproval) -> None:
        with self.data.lock:
            if pending.request.approval_id in self.data.approvals:
                raise ValueError(f"an approval with id {pending.request.approval_id!r} is stored already")
            self.data.approvals[pending.request.approval_id] = (pending, None)

    async def pending(self, scope: Scope, session_id: str) -> list[PendingApproval]:
        with self.data.lock:
            return [
                p for p, decided in self.data.approvals.values()
                if decided is None and p.scope == scope and p.request.session_id == session_id
            ]

    async def take(self, scope: Scope, approval_id: str, approved: bool, *, key: str | None = None) -> PendingApproval | None:
        with self.data.lock:
            pending, decided = self.data.approvals.get(approval_id, (None, None))
            if pending is None or pending.scope != scope:
                return None
            if decided is not None and (key is None or decided != (approved, key)):
                return None
            self.data.approvals[approval_id] = (pending, (approved, key))
            return pending

    async def erase(self, subject: Subject) -> int:
        with self.data.lock:
            gone = [i for i, (p, _) in self.data.approvals.items() if held(subject, p.scope, p.request.session_id)]
            for i in gone:
                del self.data.approvals[i]
        return len(gone)

    async def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        with self.data.lock:
            found = [p for p, _ in self.data.approvals.values() if held(subject, p.scope, p.request.session_id)]
        for p in found:
            yield {"kind": "approval", "scope": scope_record(p.scope), "approval_id": p.request.approval_id,
                   "session_id": p.request.session_id, "tool_name": p.request.tool, "arguments": p.request.arguments}


def open_memory_stores(data: MemoryData, *, embedder: Embedder | None = None) -> Stores:
    """A `Stores` over `data`: what `open_stores` gives for a URL, for this backend."""
    embedder = embedder or HashingEmbedder(dim=64)
    with data.lock:
        data.embedder = data.embedder or (embedder.name, embedder.dim)
    if data.embedder != (embedder.name, embedder.dim):
        raise EmbedderMismatchError("memory://", data.embedder[0], embedder.name)
    return Stores(
        "memory://", "bot", embedder, MemorySessionStore(data), MemoryMemoryStore(data), MemoryRagStore(data, embedder),
        MemoryKnowledgeRepository(data, embedder.dim), MemoryTrajectoryStore(data), MemoryTaskStore(data),
        MemoryAttemptNotes(data), MemoryApprovalStore(data), data.usage, summaries=data.summaries, audit=data.audit,
    )
