"""The ApprovalStore port: tool calls awaiting the user's approval, each decided once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

from agentloop.approvals import PendingApproval
from agentloop.privacy import Subject
from agentloop.scopes import Scope


@runtime_checkable
class ApprovalStore(Protocol):
    """Pending approvals, each in the scope it was stored in (`agentloop.scopes.approval_scope`);
    every call is a coroutine, and a read or take in another scope never sees a row (I11)."""

    async def add(self, pending: PendingApproval) -> None:
        """Keep `pending`, undecided, under `pending.scope`; an approval id stored already is refused (ValueError)."""
        ...

    async def pending(self, scope: Scope, session_id: str) -> list[PendingApproval]:
        """The undecided approvals of session `session_id` in `scope`, oldest first."""
        ...

    async def take(self, scope: Scope, approval_id: str, approved: bool, *, key: str | None = None) -> PendingApproval | None:
        """Decide `approval_id` and return it, atomically: the first caller gets it, every later
        caller (and any caller for an id unknown in `scope`) gets None. A later caller with the
        first one's `key` and decision gets it again: a decision turn run again after a worker
        died (the same message, so the same key) finishes what the first run began."""
        ...

    async def erase(self, subject: Subject) -> int:
        """Remove every row of `subject` (`agentloop.privacy`) in one transaction; how many (0 when run again)."""
        ...

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        """Every row kept about `subject`, one JSON-ready record at a time (docs/privacy.md gives each shape)."""
        ...
