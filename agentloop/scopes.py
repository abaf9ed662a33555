"""Which stored data a turn may see: the one tenancy rule every store and reader shares.

A session places a turn in one chain, company > org > team > project, plus a user.
Every stored row keeps the `Scope` it was written in, and a read sees exactly the rows
whose scope equals the reader's (I11). The functions below say which part of the chain
each kind of data is partitioned by:

- history: the session, within its full chain;
- memory: the user within the org (or, without a user, the session within the org);
- indexed answers (RAG): the project within its team and org (or, without a project,
  the user within the team and org; without a user either, the session);
- tasks: the project within its team and org, whichever user or session created them;
- tool calls awaiting approval: the session within its full chain, like its history.

History stored before rows named their chain is keyed by session id only; it cannot say
its org, team or user, so only a session of the default company with no org and no team
sees it (`sees_unchained_history`).

The company is the deployment: one per database unless a caller names another.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from agentloop.context import Session

DEFAULT_COMPANY = "default"


@attrs.frozen
class Scope:
    """A partition of stored data. Two scopes see each other's rows only when equal."""

    company_id: str = DEFAULT_COMPANY
    org_id: str | None = None
    team_id: str | None = None
    project_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None

    @property
    def key(self) -> str:
        """An unambiguous text form, equal exactly when the scopes are equal (for indexes)."""
        return json.dumps(
            [self.company_id, self.org_id, self.team_id, self.project_id, self.user_id, self.session_id],
            separators=(",", ":"),
        )

    @classmethod
    def from_key(cls, key: str) -> Scope:
        """The scope whose `key` is `key`; `ValueError` for text that is not one."""
        try:
            parts = json.loads(key)
        except ValueError:
            raise ValueError(f"{key!r} is not a scope key") from None
        if not (isinstance(parts, list) and len(parts) == 6 and isinstance(parts[0], str)):
            raise ValueError(f"{key!r} is not a scope key")
        if not all(part is None or isinstance(part, str) for part in parts[1:]):
            raise ValueError(f"{key!r} is not a scope key")
        return cls(*parts)


def history_scope(session: Session, company_id: str = DEFAULT_COMPANY) -> Scope:
    """A session's history belongs to the session within its full chain and user."""
    return Scope(company_id, session.org_id, session.team_id, session.project_id, session.user_id, session.id)


def sees_unchained_history(reader: Scope) -> bool:
    """Whether `reader` also sees history stored under its session id before rows named their chain."""
    return reader.company_id == DEFAULT_COMPANY and reader.org_id is None and reader.team_id is None


def memory_scope(session: Session, company_id: str = DEFAULT_COMPANY) -> Scope:
    """Memory belongs to a user within the org (or, without a user, to the session)."""
    if session.user_id:
        return Scope(company_id, session.org_id, user_id=session.user_id)
    return Scope(company_id, session.org_id, session_id=session.id)


def knowledge_scope(session: Session, company_id: str = DEFAULT_COMPANY) -> Scope:
    """Indexed answers are shared within a project of one team and org; without a project
    they stay with the user (else the session) within that team and org, never wider."""
    if session.project_id:
        return Scope(company_id, session.org_id, session.team_id, session.project_id)
    if session.user_id:
        return Scope(company_id, session.org_id, session.team_id, user_id=session.user_id)
    return Scope(company_id, session.org_id, session.team_id, session_id=session.id)


def task_scope(session: Session, company_id: str = DEFAULT_COMPANY) -> Scope:
    """Tasks are shared by the workers of one project within its team and org (no project: the team's)."""
    return Scope(company_id, session.org_id, session.team_id, session.project_id)


def approval_scope(session: Session, company_id: str = DEFAULT_COMPANY) -> Scope:
    """A tool call awaiting approval belongs to its session within the full chain and user, as its history does."""
    return history_scope(session, company_id)
