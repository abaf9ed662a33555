"""Budgets: how many tokens and dollars a turn, a session or a tenant chain may spend per day or
month (docs/adr/0025-budgets.md). The tool loop checks them before each model call and tool step."""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import attrs

from agentloop.errors import AgentloopError
from agentloop.ports.usage import Period, period_start
from agentloop.scopes import Scope

__all__ = ["DEFAULT_BUDGET_LEASE", "BudgetLimit", "BudgetScope", "BudgetSpecError", "Budgets"]


class BudgetSpecError(ValueError, AgentloopError):
    """A `--budget` value that does not read as NAME=AMOUNT with a known name."""


class BudgetScope(enum.Enum):
    """Whose spending a limit counts."""

    SESSION = "session"
    """one session of one user"""
    TENANT = "tenant"
    """the session's tenant chain (company, org, team, project): all its users and sessions"""


DEFAULT_BUDGET_LEASE = 0.01
"""`Budgets.lease` by default: a process takes 1% of a limit beyond a call's need when it reserves."""

_PERIOD_WORDS = {"daily": Period.DAY, "monthly": Period.MONTH}


def _positive(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"a budget must be above zero: {attribute.name}={value!r}")


@attrs.frozen
class BudgetLimit:
    """At most `tokens` (input and output) and `cost` US dollars per `period` for each `scope` (None: no limit of that kind)."""

    scope: BudgetScope
    period: Period
    tokens: int | None = attrs.field(default=None, validator=_positive)
    cost: float | None = attrs.field(default=None, validator=_positive)

    def key(self, scope: Scope, at: datetime) -> str:
        """The ledger line this limit counts on for a turn in `scope` (its company filled in) at `at`."""
        if self.scope is BudgetScope.SESSION:
            owner = f"{scope.company_id}/{scope.session_id}"
        else:
            owner = "/".join(part or "-" for part in (scope.company_id, scope.org_id, scope.team_id, scope.project_id))
        start = period_start(at, self.period).strftime("%Y-%m-%d" if self.period is Period.DAY else "%Y-%m")
        return f"{self.scope.value}:{owner}:{self.period.value}:{start}"

    @property
    def name(self) -> str:
        """How the user reads this limit: "the tenant's daily cost budget ($5.00)"."""
        period = next(word for word, p in _PERIOD_WORDS.items() if p is self.period)
        amounts = [f"{self.tokens} tokens"] if self.tokens is not None else []
        amounts += [f"${self.cost:.2f}"] if self.cost is not None else []
        return f"the {self.scope.value}'s {period} budget ({', '.join(amounts)})"


def _one_per_line(_: object, __: attrs.Attribute[Any], limits: tuple[BudgetLimit, ...]) -> None:
    lines = [(limit.scope, limit.period) for limit in limits]
    for line in lines:
        if lines.count(line) > 1:
            raise ValueError(
                f"two limits for the {line[0].value}'s {line[1].value}: give one BudgetLimit with both its tokens and its cost"
            )


@attrs.frozen
class Budgets:
    """A bot's budgets: `turn_tokens` per turn (its model calls' input and output) and `limits` per
    session or tenant chain and period. Each model call reserves its estimate (its prompt's tokens and
    `output_reserve` for the answer) before it is made, and settles to what it used after."""

    turn_tokens: int | None = attrs.field(default=None, validator=_positive)
    limits: tuple[BudgetLimit, ...] = attrs.field(default=(), validator=_one_per_line)
    output_reserve: int = attrs.field(default=1024, validator=attrs.validators.ge(0))
    """The tokens a call's answer is expected to take, reserved with its prompt's."""
    lease: float = attrs.field(default=DEFAULT_BUDGET_LEASE, validator=[attrs.validators.ge(0.0), attrs.validators.lt(1.0)])
    """The share of each session or tenant limit a process reserves on its ledger line at once, beyond
    what a call needs, so that the calls after it reserve and settle in memory (0: every call on the store)."""

    @property
    def configured(self) -> bool:
        """Whether any limit is set: without one no check reads the store."""
        return self.turn_tokens is not None or bool(self.limits)

    @classmethod
    def parse(cls, specs: Iterable[str]) -> Budgets:
        """Budgets from `--budget` values: `turn-tokens=20000`, or `SCOPE-PERIOD-KIND=AMOUNT` with SCOPE
        session or tenant, PERIOD daily or monthly, KIND tokens or cost (US dollars): `tenant-daily-cost=5.00`."""
        turn_tokens: int | None = None
        amounts: dict[tuple[BudgetScope, Period], dict[str, float]] = {}
        for spec in specs:
            name, _, amount = spec.partition("=")
            try:
                value = float(amount)
            except ValueError:
                raise BudgetSpecError(f"--budget {spec!r}: the amount after '=' must be a number, as in tenant-daily-cost=5.00") from None
            if not (math.isfinite(value) and value > 0):
                raise BudgetSpecError(f"--budget {spec!r}: the amount must be a number above zero, as in tenant-daily-cost=5.00")
            if name == "turn-tokens":
                turn_tokens = int(value)
                continue
            parts = name.split("-")
            if len(parts) != 3 or parts[0] not in {"session", "tenant"} or parts[1] not in _PERIOD_WORDS or parts[2] not in {"tokens", "cost"}:
                raise BudgetSpecError(
                    f"--budget {spec!r}: the name is turn-tokens or SCOPE-PERIOD-KIND with SCOPE session or tenant, "
                    "PERIOD daily or monthly and KIND tokens or cost (tenant-daily-cost=5.00, session-monthly-tokens=200000)"
                )
            amounts.setdefault((BudgetScope(parts[0]), _PERIOD_WORDS[parts[1]]), {})[parts[2]] = value
        limits = [
            BudgetLimit(scope, period, int(kinds["tokens"]) if "tokens" in kinds else None, kinds.get("cost"))
            for (scope, period), kinds in amounts.items()
        ]
        return cls(turn_tokens, tuple(limits))
