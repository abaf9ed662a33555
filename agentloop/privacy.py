"""Whose data an erase or an export covers (`Subject`), what an erase removed (`Erased`) and
the audit record it leaves (`AuditRecord`): the domain side of a user's data under their control.

A subject is a user within a tenant chain, one session, or a whole tenant chain. A stored
row belongs to it when the row's chain agrees with the subject's (`Subject.matches`) or
when the row was written by one of the subject's sessions (`Subject.sessions`, which
`Stores.erase` fills in from the stores before erasing, with the tasks and notes those
sessions made).
"""

from __future__ import annotations

import enum
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import attrs

from agentloop._log import get_logger
from agentloop.scopes import DEFAULT_COMPANY, Scope

if TYPE_CHECKING:
    from agentloop.ports.stores import Stores

_log = get_logger("agentloop.stores")


class SubjectKind(enum.Enum):
    """What a subject names."""

    USER = "user"
    SESSION = "session"
    CHAIN = "chain"


@attrs.frozen
class Subject:
    """Whose rows an erase or export covers; build one with `user`, `session` or `chain`.

    The company and org always match exactly. A user subject's team or project, when
    given, narrows it to rows of that team or project and to the user's rows that name
    none (memory, kept per user within the org); a chain subject's, to rows of exactly them.
    """

    kind: SubjectKind
    company_id: str = DEFAULT_COMPANY
    org_id: str | None = None
    team_id: str | None = None
    project_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    sessions: frozenset[str] = frozenset()
    """The subject's sessions (its own, for a session subject), filled in by `Stores.erase`."""
    tasks: frozenset[str] = frozenset()
    """The ids of tasks its sessions created, filled in by `Stores.erase`."""
    notes: frozenset[int] = frozenset()
    """The ids of notes distilled from its sessions, filled in by `Stores.erase`."""

    def __attrs_post_init__(self) -> None:
        if self.kind is SubjectKind.USER and not self.user_id:
            raise ValueError("a user subject needs the user's id: give --user")
        if self.kind is SubjectKind.SESSION and not self.session_id:
            raise ValueError("a session subject needs the session's id: give --session")

    @classmethod
    def user(
        cls, user_id: str, *, company_id: str = DEFAULT_COMPANY, org_id: str | None = None,
        team_id: str | None = None, project_id: str | None = None,
    ) -> Subject:
        """The user `user_id` within the chain given."""
        return cls(SubjectKind.USER, company_id, org_id, team_id, project_id, user_id=user_id)

    @classmethod
    def session(cls, session_id: str, *, company_id: str = DEFAULT_COMPANY, org_id: str | None = None) -> Subject:
        """The session `session_id` within the company and org given."""
        return cls(SubjectKind.SESSION, company_id, org_id, session_id=session_id, sessions=frozenset({session_id}))

    @classmethod
    def chain(
        cls, *, company_id: str = DEFAULT_COMPANY, org_id: str | None = None,
        team_id: str | None = None, project_id: str | None = None,
    ) -> Subject:
        """Every row of the tenant chain given (a team or project narrows it)."""
        return cls(SubjectKind.CHAIN, company_id, org_id, team_id, project_id)

    def in_chain(self, company_id: str | None, org_id: str | None) -> bool:
        """Whether a row of this company and org can belong to the subject at all."""
        return company_id == self.company_id and org_id == self.org_id

    def matches(self, scope: Scope) -> bool:
        """Whether a row stored in `scope` belongs to the subject (what the SQL stores say in WHERE)."""
        if not self.in_chain(scope.company_id, scope.org_id):
            return False
        if scope.session_id is not None and scope.session_id in self.sessions and (
            self.kind is not SubjectKind.USER or scope.user_id is None
        ):
            return True
        if self.kind is SubjectKind.SESSION:
            return False
        loose = self.kind is SubjectKind.USER
        for wanted, had in ((self.team_id, scope.team_id), (self.project_id, scope.project_id)):
            if wanted is not None and had != wanted and not (loose and had is None):
                return False
        return self.kind is SubjectKind.CHAIN or scope.user_id == self.user_id

    def described(self) -> dict[str, Any]:
        """The subject as the audit log keeps it: its kind and ids, no resolved sessions or content."""
        return {
            "kind": self.kind.value, "company_id": self.company_id, "org_id": self.org_id, "team_id": self.team_id,
            "project_id": self.project_id, "user_id": self.user_id, "session_id": self.session_id,
        }


@attrs.frozen
class Erased:
    """How many rows an erase removed from each store (a row of a store's side tables counts too)."""

    sessions: int = 0
    memory: int = 0
    rag: int = 0
    knowledge: int = 0
    trajectories: int = 0
    tasks: int = 0
    attempt_notes: int = 0
    approvals: int = 0
    usage: int = 0
    summaries: int = 0

    @property
    def total(self) -> int:
        return sum(attrs.astuple(self))


@attrs.frozen
class AuditRecord:
    """One erase or export: who asked (`actor`), what it covered, when, and the counts; never content."""

    actor: str
    action: str
    subject: dict[str, Any]
    at: datetime
    counts: dict[str, int]


ERASE_ORDER = (
    "knowledge", "rag", "attempt_notes", "tasks", "summaries", "approvals", "usage", "memory", "trajectories", "sessions",
)
"""The stores in the order an erase empties them: each before those that say which rows belong to
the subject (history names its sessions, trajectories the notes they made), so an erase cut
off halfway and run again still finds every row."""
_SESSION_SOURCES = ("sessions", "memory", "usage", "approvals", "trajectories", "summaries")


async def resolve(stores: Stores, subject: Subject) -> Subject:
    """`subject` with its sessions, the tasks they created and the notes distilled from them, read from `stores`."""
    sessions = set(subject.sessions)
    if subject.kind is not SubjectKind.SESSION:
        for name in _SESSION_SOURCES:
            async for record in getattr(stores, name).export(subject):
                session = record.get("session_id") or record.get("scope", {}).get("session_id")
                if isinstance(session, str):
                    sessions.add(session)
    subject = attrs.evolve(subject, sessions=frozenset(sessions))
    tasks = frozenset([str(record["id"]) async for record in stores.tasks.export(subject)])
    notes = frozenset(
        [int(record["note_id"]) async for record in stores.trajectories.export(subject) if record.get("kind") == "distilled"]
    )
    if notes:  # a distilled row names its session only: keep the notes of the subject's company and org
        named = attrs.evolve(subject, notes=notes)
        notes = frozenset([int(record["id"]) async for record in stores.knowledge.export(named) if record.get("kind") == "note"])
    return attrs.evolve(subject, tasks=tasks, notes=notes)


async def erase_subject(stores: Stores, subject: Subject, *, actor: str) -> Erased:
    """Erase `subject` from every store (`ERASE_ORDER`), each store in its own transaction, then
    once more for what a turn in flight wrote meanwhile; audit it as done by `actor`."""
    counts = dict.fromkeys(ERASE_ORDER, 0)
    for _ in range(2):
        resolved = await resolve(stores, subject)
        for name in ERASE_ORDER:
            counts[name] += await getattr(stores, name).erase(resolved)
    erased = Erased(**counts)
    await stores.audit.record(AuditRecord(actor, "erase", subject.described(), datetime.now(UTC), counts))
    _log.info("stores.erased", actor=actor, subject=subject.described(), rows=erased.total)
    return erased


async def export_subject(stores: Stores, subject: Subject, *, actor: str) -> AsyncIterator[dict[str, Any]]:
    """Every record each store keeps about `subject`, tagged with its store (`"store"`), then audited
    as asked by `actor` with the records counted per store."""
    resolved = await resolve(stores, subject)
    counts = dict.fromkeys(ERASE_ORDER, 0)
    for name in reversed(ERASE_ORDER):
        async for record in getattr(stores, name).export(resolved):
            counts[name] += 1
            yield {"store": name} | record
    await stores.audit.record(AuditRecord(actor, "export", subject.described(), datetime.now(UTC), counts))


async def json_array(records: AsyncIterator[dict[str, Any]]) -> AsyncIterator[str]:
    """The records as one JSON array, each written as it is read (a long history never sits in memory whole)."""
    yield "["
    separator = "\n"
    async for record in records:
        yield separator + json.dumps(record, default=str, ensure_ascii=False)
        separator = ",\n"
    yield "\n]\n"


async def chained(*streams: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    """The records of each stream in turn."""
    for stream in streams:
        async for record in stream:
            yield record


def scope_record(scope: Scope) -> dict[str, str | None]:
    """A scope as an export record names it."""
    return attrs.asdict(scope)
