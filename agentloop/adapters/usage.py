"""What every UsageStore backend shares (a report's keys, the sums as SQL), and the in-memory
one: for tests, and for a bot that counts usage without keeping it."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

from agentloop.adapters._rows import SCOPE_COLUMNS
from agentloop.messages import Usage
from agentloop.privacy import Subject, scope_record
from agentloop.ports.usage import MISSING, Charge, RecordedCall, Spent, UsageFilter, UsageGroup, UsageLine, UsageRecord, UsageTotal
from agentloop.scopes import Scope


SUMS = (
    "COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cache_read_tokens), 0), "
    "COALESCE(SUM(cache_write_tokens), 0), COALESCE(SUM(calls), 0), COALESCE(SUM(cost), 0), "
    "COALESCE(SUM(CASE WHEN cost IS NULL THEN calls ELSE 0 END), 0)"
)
"""What a sum selects, in `summed`'s order; the same SQL on SQLite and PostgreSQL."""

_PART = "COALESCE({}, '" + MISSING + "')"
KEYS = {
    UsageGroup.TENANT: " || '/' || ".join(_PART.format(column) for column in SCOPE_COLUMNS[:4]),
    UsageGroup.USER: "scope_company || '/' || " + _PART.format("scope_user"),
    UsageGroup.SESSION: "scope_company || '/' || " + _PART.format("scope_session"),
    UsageGroup.DAY: "day",
    UsageGroup.MONTH: "substr(day, 1, 7)",
    UsageGroup.MODEL: _PART.format("model"),
}
"""Each report's key as SQL, spelled as `line_key` spells it."""


def summed(row: tuple[Any, ...]) -> UsageTotal:
    """A `SUMS` row as a total."""
    read, wrote = int(row[2]), int(row[3])
    return UsageTotal(Usage(int(row[0]), int(row[1]), read, wrote), int(row[4]), float(row[5]), int(row[6]))


def utc_text(at: datetime) -> str:
    """An aware time as the UTC text the table keeps (in order, compared as text): 2026-11-26T06:42:16.308017Z."""
    utc = at if at.tzinfo is UTC else at.astimezone(UTC)  # every turn writes one: isoformat is a fifth of strftime's cost
    return f"{utc.replace(tzinfo=None).isoformat(timespec='microseconds')}Z"


def line_key(by: UsageGroup, scope: Scope, at: datetime, model: str | None) -> str:
    """The report key of a call of a turn in `scope` at `at`, as the SQL stores spell it."""
    def part(value: str | None) -> str:
        return MISSING if value is None else value

    if by is UsageGroup.TENANT:
        return "/".join(part(p) for p in (scope.company_id, scope.org_id, scope.team_id, scope.project_id))
    if by is UsageGroup.USER:
        return f"{scope.company_id}/{part(scope.user_id)}"
    if by is UsageGroup.SESSION:
        return f"{scope.company_id}/{part(scope.session_id)}"
    if by is UsageGroup.MODEL:
        return part(model)
    day = at.astimezone(UTC).strftime("%Y-%m-%d")
    return day if by is UsageGroup.DAY else day[:7]


def call_total(call: RecordedCall) -> UsageTotal:
    """One call as a sum of one."""
    return UsageTotal(call.usage, 1, call.cost or 0.0, int(call.cost is None))


def fits(charge: Charge, tokens: int, cost: float) -> bool:
    """Whether `charge` may go on a line holding `tokens` and `cost`: below each limit now, and within it after."""
    if charge.token_limit is not None and not (tokens < charge.token_limit and tokens + charge.tokens <= charge.token_limit):
        return False
    return charge.cost_limit is None or (cost < charge.cost_limit and cost + charge.cost <= charge.cost_limit)


def fits_sql(charge: Charge, mark: str) -> tuple[str, list[Any]]:
    """`fits` as the WHERE of a ledger UPDATE, with `mark` for a parameter (a backend spells its own), and its parameters."""
    conditions, params = ["1 = 1"], list[Any]()
    if charge.token_limit is not None:
        conditions.append(f"tokens < {mark} AND tokens + {mark} <= {mark}")
        params += [charge.token_limit, charge.tokens, charge.token_limit]
    if charge.cost_limit is not None:
        conditions.append(f"cost < {mark} AND cost + {mark} <= {mark}")
        params += [charge.cost_limit, charge.cost, charge.cost_limit]
    return " AND ".join(conditions), params


def in_key_order(charges: Sequence[Charge]) -> list[Charge]:
    """The charges in the order their lines are locked: every writer takes the same order, so none waits on another in a circle."""
    return sorted(charges, key=lambda charge: charge.key)


class MemoryUsageStore:
    """Usage in a list guarded by a lock; gone when the process ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[str, UsageRecord] = {}
        self._ledger: dict[str, Spent] = {}
        self._days: dict[tuple[Scope, datetime, str | None, bool], UsageTotal] = {}
        """Rolled-up days (`roll_up`): the sums of a day's calls per scope, model and priced-or-not."""

    async def record(self, record: UsageRecord) -> bool:
        with self._lock:
            if not record.calls or record.turn_id in self._records:
                return False
            self._records[record.turn_id] = record
            return True

    async def total(self, where: UsageFilter) -> UsageTotal:
        total = UsageTotal()
        for record in self._covered(where):
            for call in record.calls:
                total += call_total(call)
        for _, summed_day in self._covered_days(where):
            total += summed_day
        return total

    async def report(self, where: UsageFilter, by: UsageGroup) -> list[UsageLine]:
        lines: dict[str, UsageTotal] = {}
        for record in self._covered(where):
            for call in record.calls:
                key = line_key(by, record.scope, record.at, call.model)
                lines[key] = lines.get(key, UsageTotal()) + call_total(call)
        for (scope, day, model, _), summed_day in self._covered_days(where):
            key = line_key(by, scope, day, model)
            lines[key] = lines.get(key, UsageTotal()) + summed_day
        return [UsageLine(key, lines[key]) for key in sorted(lines)]

    async def erase(self, subject: Subject) -> int:
        with self._lock:
            gone = [turn for turn, record in self._records.items() if subject.matches(record.scope)]
            for turn in gone:
                del self._records[turn]
            days = [key for key in self._days if subject.matches(key[0])]
            for key in days:
                del self._days[key]
        return len(gone) + len(days)

    async def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        with self._lock:
            found = [record for record in self._records.values() if subject.matches(record.scope)]
            days = [(key, summed) for key, summed in self._days.items() if subject.matches(key[0])]
        for record in found:
            for index, call in enumerate(record.calls):
                yield {"kind": "call", "scope": scope_record(record.scope), "turn_id": record.turn_id, "call_index": index,
                       "at": record.at.isoformat(), "model": call.model, "input_tokens": call.usage.input_tokens,
                       "output_tokens": call.usage.output_tokens, "cost": call.cost}
        for (scope, day, model, unpriced), summed in days:
            yield {"kind": "call", "scope": scope_record(scope), "turn_id": f"day:{day.date().isoformat()}", "at": day.isoformat(),
                   "model": model, "input_tokens": summed.usage.input_tokens, "output_tokens": summed.usage.output_tokens,
                   "cost": None if unpriced else summed.cost, "calls": summed.calls}

    def _covered(self, where: UsageFilter) -> list[UsageRecord]:
        with self._lock:
            return [record for record in self._records.values() if where.matches(record.scope, record.at)]

    def _covered_days(self, where: UsageFilter) -> list[tuple[tuple[Scope, datetime, str | None, bool], UsageTotal]]:
        with self._lock:
            return [(key, summed_day) for key, summed_day in self._days.items() if where.matches(key[0], key[1])]

    def roll_up(self, before: datetime) -> tuple[int, int]:
        """Sum the calls of each whole day before `before` per scope, model and priced-or-not, as
        the SQL stores roll them up (totals per day stay the same); (calls removed, day lines added)."""
        cut = before.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        removed, lines = 0, len(self._days)
        with self._lock:
            for turn_id, record in list(self._records.items()):
                day = record.at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
                if day >= cut:
                    continue
                del self._records[turn_id]
                for call in record.calls:
                    key = (record.scope, day, call.model, call.cost is None)
                    self._days[key] = self._days.get(key, UsageTotal()) + call_total(call)
                    removed += 1
            return removed, len(self._days) - lines

    async def reserve(self, charges: Sequence[Charge]) -> Charge | None:
        with self._lock:
            for charge in charges:
                line = self._ledger.get(charge.key, Spent())
                if not fits(charge, line.tokens, line.cost):
                    return charge
            self._add(charges)
            return None

    async def spend(self, charges: Sequence[Charge]) -> None:
        with self._lock:
            self._add(charges)

    async def spent(self, key: str) -> Spent:
        with self._lock:
            return self._ledger.get(key, Spent())

    def _add(self, charges: Sequence[Charge]) -> None:
        for charge in charges:
            line = self._ledger.get(charge.key, Spent())
            self._ledger[charge.key] = Spent(line.tokens + charge.tokens, line.cost + charge.cost)
