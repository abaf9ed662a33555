"""The UsageStore port: the tokens and cost of every model call, kept per turn and summed per
session, user, tenant chain and period."""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from agentloop.messages import Usage
from agentloop.privacy import Subject
from agentloop.scopes import Scope

__all__ = [
    "Charge", "Period", "RecordedCall", "Spent", "UsageFilter", "UsageGroup", "UsageLine", "UsageRecord", "UsageStore", "UsageTotal",
    "period_start",
]

MISSING = "-"
"""How a report's key spells a part of the chain (or a model) a row does not have."""


@attrs.frozen
class RecordedCall:
    """One model call as stored: the model that answered, its usage, and its cost in US dollars
    (None: the model's price is unknown, which is never counted as zero)."""

    model: str | None
    usage: Usage
    cost: float | None


@attrs.frozen
class UsageRecord:
    """The model calls of turn `turn_id`, in the session's `scope` (its full chain, user and
    session), at `at` (an aware time; stored as UTC)."""

    turn_id: str
    scope: Scope
    at: datetime
    calls: tuple[RecordedCall, ...]


class Period(enum.Enum):
    """A budget or report period, in UTC."""

    DAY = "day"
    MONTH = "month"


def period_start(at: datetime, period: Period) -> datetime:
    """The UTC start of the day or month `at` (an aware time) falls in."""
    utc = at.astimezone(UTC)
    day = utc.replace(hour=0, minute=0, second=0, microsecond=0)
    return day if period is Period.DAY else day.replace(day=1)


@attrs.frozen
class UsageFilter:
    """Which calls a sum covers: each id given must match (None: any), and the call's turn must
    have been at or after `since` and before `until` (aware times, None: no bound).

    `UsageFilter(company_id="acme", org_id="o1")` is everything of the org o1, whichever team,
    project, user or session; add `user_id` for one user in it, `session_id` for one session."""

    company_id: str | None = None
    org_id: str | None = None
    team_id: str | None = None
    project_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    @property
    def ids(self) -> tuple[str | None, ...]:
        """The ids, in the order of a scope's columns."""
        return (self.company_id, self.org_id, self.team_id, self.project_id, self.user_id, self.session_id)

    def matches(self, scope: Scope, at: datetime) -> bool:
        """Whether a call of a turn in `scope` at `at` is in the sum (what the SQL stores say in WHERE)."""
        have = (scope.company_id, scope.org_id, scope.team_id, scope.project_id, scope.user_id, scope.session_id)
        if any(wanted is not None and wanted != had for wanted, had in zip(self.ids, have, strict=True)):
            return False
        return (self.since is None or at >= self.since) and (self.until is None or at < self.until)


class UsageGroup(enum.Enum):
    """How a report splits the calls: the key of each line."""

    TENANT = "tenant"
    """company/org/team/project"""
    USER = "user"
    """company/user"""
    SESSION = "session"
    """company/session"""
    DAY = "day"
    """YYYY-MM-DD (UTC)"""
    MONTH = "month"
    """YYYY-MM (UTC)"""
    MODEL = "model"
    """the model's name"""


@attrs.frozen
class UsageTotal:
    """Calls summed: their usage, how many there were, the dollars of those whose price is known
    (`cost`) and how many had no known price (`unpriced_calls`)."""

    usage: Usage = Usage(0, 0)
    calls: int = 0
    cost: float = 0.0
    unpriced_calls: int = 0

    @property
    def known_cost(self) -> float | None:
        """The whole cost, or None when any call's price is unknown (never a sum that leaves them out)."""
        return None if self.unpriced_calls else self.cost

    def __add__(self, other: UsageTotal) -> UsageTotal:
        return UsageTotal(
            self.usage + other.usage, self.calls + other.calls, self.cost + other.cost, self.unpriced_calls + other.unpriced_calls
        )


@attrs.frozen
class UsageLine:
    """One line of a report: its key (`UsageGroup` says its form) and the calls summed under it."""

    key: str
    total: UsageTotal


@attrs.frozen
class Charge:
    """Tokens and US dollars put on one budget's ledger line `key` (its scope and period), and the
    limits the line may not pass (None: no limit of that kind). Amounts may be negative: a call's
    actual usage settling what was reserved for it."""

    key: str
    tokens: int
    cost: float = 0.0
    token_limit: int | None = None
    cost_limit: float | None = None


@attrs.frozen
class Spent:
    """What a ledger line holds: tokens and dollars reserved or spent."""

    tokens: int = 0
    cost: float = 0.0


@runtime_checkable
class UsageStore(Protocol):
    """Model calls per turn, and the budgets' ledger; every call is a coroutine. The sums are for
    reports; a budget counts on the ledger (`reserve`, `spend`) before each model call."""

    async def record(self, record: UsageRecord) -> bool:
        """Keep `record`'s calls, atomically; True. A turn recorded already (the same `turn_id`) is
        not recorded again and the answer is False, so a write tried again counts once."""
        ...

    async def total(self, where: UsageFilter) -> UsageTotal:
        """The calls `where` covers, summed."""
        ...

    async def report(self, where: UsageFilter, by: UsageGroup) -> list[UsageLine]:
        """The calls `where` covers, summed per key of `by`, in key order."""
        ...

    async def reserve(self, charges: Sequence[Charge]) -> Charge | None:
        """Add every charge to its ledger line, atomically across processes, only if each line stays
        within its limits (and was below them before: a charge of nothing checks a line is not used up);
        None when added, else the first charge that did not fit, and nothing is added."""
        ...

    async def spend(self, charges: Sequence[Charge]) -> None:
        """Add every charge to its line whatever the limits: a call's usage less what it reserved."""
        ...

    async def spent(self, key: str) -> Spent:
        """What ledger line `key` holds (nothing for a line never charged)."""
        ...

    async def erase(self, subject: Subject) -> int:
        """Remove every row of `subject` (`agentloop.privacy`) in one transaction; how many (0 when run again)."""
        ...

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        """Every row kept about `subject`, one JSON-ready record at a time (docs/privacy.md gives each shape)."""
        ...
