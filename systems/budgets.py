"""The tool loop's budget checks (`BudgetGuard`): a model call reserves its estimate before it is
made and settles to what it used after; a tool step goes ahead only while no budget is used up
(docs/adr/0025-budgets.md).

Reservations come from a lease: the first call on a ledger line reserves its estimate and
`Budgets.lease` of the line's limit at once on the usage store, and the calls after it reserve and
settle against what the process holds, in memory, until it runs short. The store is written again
only then, when a call used more than the process holds, and when the lease is given back
(`release`). Near a limit a process leases only what a call needs, so the ledger line counts every
call in flight and every lease, and the limit holds across processes as it does without leases.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

import attrs

from agentloop import AgentContext, BudgetLimit, Budgets, CallUsage, LlmReply, LlmRequest, Prices, Session, Usage, history_scope
from agentloop._log import get_logger
from agentloop.ports import Charge, Period, UsageStore, period_start
from agentloop.tokens import EstimatedTokens, TokenCounter, request_tokens

_log = get_logger("agentloop.budgets")

_NO_COST = 1e-12
"""Dollars below which what is held is float arithmetic's leftover, not a lease."""
LINES_KEPT = 4096
"""Ledger lines a guard holds a lease on at once, the most recently used: an older one is given back."""


@attrs.frozen
class Reservation:
    """What one model call reserved, `tokens` and `cost`, on each ledger line of `keys` (none without a
    session or tenant limit), to settle once its usage is known."""

    keys: tuple[str, ...]
    tokens: int
    cost: float


class _Unheld(NamedTuple):
    """A call's reservation that what the guard holds does not cover: to reserve on the store first."""

    keys: tuple[str, ...]
    tokens: int
    cost: float


@attrs.define
class _Held:
    """What the process holds on one ledger line, per kind: leased and not used yet (below zero:
    used and not yet written). A kind the line has no limit of is only ever used, and written
    whenever the line is."""

    tokens: int = 0
    cost: float = 0.0

    def covers(self, limit: BudgetLimit, tokens: int, cost: float) -> bool:
        """Whether what is held pays for `tokens` and `cost` in every kind `limit` limits."""
        return (limit.tokens is None or self.tokens >= tokens) and (limit.cost is None or self.cost >= cost)

    def holds_some(self, limit: BudgetLimit) -> bool:
        """Whether something is held of every kind `limit` limits: then the line is not used up."""
        return (limit.tokens is None or self.tokens > 0) and (limit.cost is None or self.cost > _NO_COST)

    def topped_up(self, key: str, limit: BudgetLimit, tokens: int, cost: float, lease: float) -> Charge:
        """The charge on line `key` that brings each limited kind that does not cover the call to `tokens`
        or `cost` and `lease` of its limit beyond, checked against that limit only, and writes what an
        unlimited kind used; a kind that covers the call is left as it is."""
        short_tokens = limit.tokens is not None and self.tokens < tokens
        short_cost = limit.cost is not None and self.cost < cost
        more_tokens = (
            -self.tokens if limit.tokens is None
            else tokens + int(limit.tokens * lease) - self.tokens if short_tokens else 0
        )
        more_cost = -self.cost if limit.cost is None else cost + limit.cost * lease - self.cost if short_cost else 0.0
        return Charge(key, more_tokens, more_cost, limit.tokens if short_tokens else None, limit.cost if short_cost else None)

    def owed(self, key: str, limit: BudgetLimit) -> Charge | None:
        """The charge that writes what was used beyond what is held, if a limited kind ran short."""
        if not ((limit.tokens is not None and self.tokens < 0) or (limit.cost is not None and self.cost < 0)):
            return None
        return Charge(key, max(0, -self.tokens), max(0.0, -self.cost))

    def unwritten(self, key: str) -> Charge | None:
        """The charge that writes everything held back to line `key` (without a lease, each settlement)."""
        return Charge(key, -self.tokens, -self.cost) if self.tokens or abs(self.cost) > _NO_COST else None

    def add(self, tokens: int, cost: float) -> None:
        self.tokens += tokens
        self.cost += cost


class BudgetGuard:
    """Checks `budgets` for the turns of one tool loop; made only when a budget is set, so a bot
    without one reads nothing. Limits per session or tenant count on `usage`'s ledger, in the
    session's tenant chain within `company_id`, from a lease the guard holds on each line (see the
    module); dollars come from `prices`. A model whose price is unknown is counted in tokens only,
    and each such call is logged: its cost is never taken as zero quietly."""

    def __init__(
        self, budgets: Budgets, usage: UsageStore | None, *, prices: Prices, company_id: str, tokens: TokenCounter | None = None
    ) -> None:
        if budgets.limits and usage is None:
            raise ValueError("session and tenant budgets count on a usage store: pass usage=... (such as stores.usage)")
        self.budgets = budgets
        self.usage = usage
        self.prices = prices
        self.company_id = company_id
        self.tokens = tokens or EstimatedTokens()
        self._leases = (budgets.lease, 0.0) if budgets.lease else (0.0,)
        self._held: OrderedDict[str, _Held] = OrderedDict()
        self._keys: dict[tuple[Session, datetime], tuple[str, ...]] = {}
        self._last_keys: tuple[Session, datetime, datetime, tuple[str, ...]] | None = None
        self._recent: tuple[tuple[str, ...], list[_Held]] | None = None  # see `_lines`
        self._lock = threading.Lock()  # turns on several threads' loops may share a guard

    def _line_keys(self, ctx: AgentContext) -> tuple[str, ...]:
        """The ledger line of each limit for this turn (its session and day), remembered per session and day
        (the last ones asked for without a lookup: a turn asks several times)."""
        at, last = ctx.clock.now(), self._last_keys
        if last is not None and last[0] is ctx.session and last[1] <= at < last[2]:
            return last[3]
        day = period_start(at, Period.DAY)
        keys = self._keys.get((ctx.session, day))
        if keys is None:
            if len(self._keys) >= LINES_KEPT:
                self._keys.clear()
            scope = history_scope(ctx.session, self.company_id)
            keys = self._keys[ctx.session, day] = tuple(limit.key(scope, at) for limit in self.budgets.limits)
        self._last_keys = (ctx.session, day, day + timedelta(days=1), keys)
        return keys

    def _refusal(self, keys: Sequence[str], refused: Charge) -> str:
        return f"{self.budgets.limits[list(keys).index(refused.key)].name} is used up"

    def _turn_refusal(self, used: Usage, more: int) -> str | None:
        limit = self.budgets.turn_tokens
        if limit is None or used.input_tokens + used.output_tokens + more <= limit and used.input_tokens + used.output_tokens < limit:
            return None
        return f"the turn's budget ({limit} tokens) is used up"

    def _cost(self, model: str | None, usage: Usage, ctx: AgentContext) -> float:
        cost = self.prices.cost(model, usage)
        if cost is None and any(limit.cost is not None for limit in self.budgets.limits):
            _log.warning("budget.cost_unknown", model=model, turn_id=ctx.turn_id, counted="tokens only")
        return cost or 0.0

    def _lines(self, keys: tuple[str, ...]) -> list[_Held]:
        """`_line` of each of `keys` (the caller holds the lock); the lines of the same `keys` as the last time,
        with no other line used or given back since, are the most recent already and are not looked up again."""
        recent = self._recent
        if recent is not None and recent[0] is keys:
            return recent[1]
        lines = [self._line(key) for key in keys]
        self._recent = (keys, lines)
        return lines

    def _line(self, key: str) -> _Held:
        """What is held on line `key`, the line now the most recently used one (the caller holds the lock)."""
        self._recent = None
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = _Held()
        else:
            self._held.move_to_end(key)
        return held

    async def before_call(self, ctx: AgentContext, used: Usage, request: LlmRequest, model: str | None) -> Reservation | str:
        """Reserve the call `request` is about to make (its prompt's tokens and the answer's reserve);
        the reservation, or why the turn stops (a budget it would pass, or one used up)."""
        planned = self._reserve_held(ctx, used, request, model)
        return await self._reserve_on_store(planned) if isinstance(planned, _Unheld) else planned

    async def _reserve_on_store(self, planned: _Unheld) -> Reservation | str:
        """The reservation `planned` made on the store (what the guard holds fell short), or why the turn stops."""
        refused = await self._take(planned.keys, planned.tokens, planned.cost)
        return Reservation(*planned) if refused is None else self._refusal(planned.keys, refused)

    def _reserve_held(self, ctx: AgentContext, used: Usage, request: LlmRequest, model: str | None) -> Reservation | str | _Unheld:
        """`before_call` from what the guard holds, without the store: the reservation, why the turn stops,
        or, when what is held falls short, what to reserve on the store."""
        budgets = self.budgets
        reserve = budgets.output_reserve
        estimate = request_tokens(self.tokens, request.messages, request.tools, model) + reserve
        refusal = self._turn_refusal(used, estimate)
        if refusal is not None:
            return refusal
        if not budgets.limits:
            return Reservation((), estimate, 0.0)
        cost = self._cost(model, Usage(estimate - reserve, reserve), ctx)
        keys = self._line_keys(ctx)
        if self._taken(keys, estimate, cost, self._leases[0]) is not None:
            return _Unheld(keys, estimate, cost)
        return Reservation(keys, estimate, cost)

    async def _take(self, keys: tuple[str, ...], tokens: int, cost: float) -> Charge | None:
        """Take `tokens` and `cost` on each line of `keys` from what is held, topping the lines that run short
        up on the store first (with a lease, else, when that does not fit, with what they need); None, or the
        first charge that does not fit. A top-up is checked again once made: concurrent calls may have taken it."""
        leases = list(self._leases)
        while (short := self._taken(keys, tokens, cost, leases[0])) is not None:
            refused = await asyncio.shield(self._top_up(short))
            if refused is not None:
                leases.pop(0)
                if not leases:
                    return refused
                continue
            await self._give_back_the_oldest()
        return None

    def _taken(self, keys: tuple[str, ...], tokens: int, cost: float, lease: float) -> list[Charge] | None:
        """Take `tokens` and `cost` from what each line of `keys` holds if every one covers them (None), else
        take nothing: the top-ups of the lines that fall short, with `lease` of their limits beyond."""
        with self._lock:
            lines = self._lines(keys)
            for line, limit in zip(lines, self.budgets.limits):
                if not line.covers(limit, tokens, cost):
                    return [
                        line.topped_up(key, limit, tokens, cost, lease)
                        for line, key, limit in zip(lines, keys, self.budgets.limits, strict=True) if not line.covers(limit, tokens, cost)
                    ]
            for line in lines:
                line.add(-tokens, -cost)
            return None

    async def _top_up(self, short: list[Charge]) -> Charge | None:
        """Reserve `short` on the store and, once it fits, count it as held: one step, finished even when the
        call that asked is cancelled meanwhile, so the guard never loses a reservation the ledger made."""
        assert self.usage is not None  # __init__ refuses limits without a store
        refused = await self.usage.reserve(short)
        if refused is None:
            with self._lock:
                for top in short:
                    self._line(top.key).add(top.tokens, top.cost)
        return refused

    async def _give_back_the_oldest(self) -> None:
        """Give back the leases of the lines used longest ago beyond `LINES_KEPT`."""
        with self._lock:
            dropped = [self._held.popitem(last=False) for _ in range(len(self._held) - LINES_KEPT)]
            self._recent = None
        if dropped:
            await self._write(dropped)

    async def _write(self, lines: Iterable[tuple[str, _Held]]) -> None:
        """Put what `lines` hold back on the ledger (a lease given back, a use not yet written)."""
        charges = [charge for key, held in lines if (charge := held.unwritten(key)) is not None]
        if charges and self.usage is not None:
            await self.usage.spend(charges)

    async def _use(self, keys: tuple[str, ...], reserved: tuple[int, float], tokens: int, cost: float) -> None:
        """Count `tokens` and `cost` used on each line of `keys` after giving back what was `reserved` there;
        what a line's holding does not pay for is written to the store at once."""
        owed: list[Charge] = []
        with self._lock:
            for key, limit, line in zip(keys, self.budgets.limits, self._lines(keys), strict=True):
                line.add(reserved[0] - tokens, reserved[1] - cost)
                short = line.owed(key, limit) if self.budgets.lease else line.unwritten(key)
                if short is not None:
                    line.add(short.tokens, short.cost)
                    owed.append(short)
        if owed:
            await asyncio.shield(self._write_owed(owed))

    async def _write_owed(self, owed: list[Charge]) -> None:
        """Write what calls used beyond what was held; if the store refuses, it stays owed (for the line's next write)."""
        assert self.usage is not None
        try:
            await self.usage.spend(owed)
        except BaseException:
            with self._lock:
                for charge in owed:
                    self._line(charge.key).add(-charge.tokens, -charge.cost)
            raise

    async def settle(self, ctx: AgentContext, reservation: Reservation, usage: Usage | None, model: str | None) -> None:
        """Put what the call used in place of what it reserved (nothing used: the reservation is given back)."""
        if not reservation.keys or self.usage is None:
            return
        tokens = 0 if usage is None else usage.input_tokens + usage.output_tokens
        cost = 0.0 if usage is None else self._cost(model, usage, ctx)
        await self._use(reservation.keys, (reservation.tokens, reservation.cost), tokens, cost)

    async def guarded(
        self, ctx: AgentContext, used: Usage, request: LlmRequest, model: str | None, call: Callable[[], Awaitable[LlmReply]]
    ) -> LlmReply | str:
        """Make the model call `call` (asking `model` with `request`, after `used` tokens this turn) reserved
        before and settled after, even when it fails; its reply, or why a budget stops it unmade."""
        reservation = await self.before_call(ctx, used, request, model)
        if isinstance(reservation, str):
            return reservation
        reply: LlmReply | None = None
        try:
            reply = await call()
        finally:
            spent, answered = (None, model) if reply is None else (reply.usage, reply.model or model)
            await self.settle(ctx, reservation, spent, answered)
        return reply

    async def charge(self, ctx: AgentContext, calls: Iterable[CallUsage]) -> None:
        """Put model calls made for this turn elsewhere (by a bot it asked) on its ledger lines, whatever the limits."""
        if not self.budgets.limits or self.usage is None:
            return
        calls = tuple(calls)
        tokens = sum(call.usage.input_tokens + call.usage.output_tokens for call in calls)
        cost = sum(self._cost(call.model, call.usage, ctx) for call in calls)
        await self._use(self._line_keys(ctx), (0, 0.0), tokens, cost)

    async def before_tools(self, ctx: AgentContext, used: Usage) -> str | None:
        """Why a tool step may not run (a budget used up), or None. A line the process holds some of
        is not used up; the others are asked of the store."""
        refusal = self._turn_refusal(used, 0)
        if refusal is not None or not self.budgets.limits:
            return refusal
        keys = self._line_keys(ctx)
        with self._lock:
            unheld = [
                Charge(key, 0, 0.0, limit.tokens, limit.cost)
                for key, limit in zip(keys, self.budgets.limits, strict=True) if not self._line(key).holds_some(limit)
            ]
        if not unheld:
            return None
        assert self.usage is not None
        refused = await self.usage.reserve(unheld)
        return None if refused is None else self._refusal(keys, refused)

    @property
    def holds(self) -> bool:
        """Whether the guard holds a lease, or a use not yet written, on some ledger line."""
        with self._lock:
            return any(held.tokens or abs(held.cost) > _NO_COST for held in self._held.values())

    async def release(self) -> None:
        """Give back every lease this guard holds and write what it used and has not written: when the
        process stops, so that other processes may spend what it did not. A store that fails here is
        logged (budget.leases_kept): the ledger then counts the leases until their period ends."""
        with self._lock:
            lines = list(self._held.items())
            self._held.clear()
            self._recent = None
        try:
            await self._write(lines)
        except Exception as error:  # a store out of reach as the process stops: the leases stay until their period ends
            _log.warning("budget.leases_kept", lines=len(lines), error=f"{type(error).__name__}: {error}")


def release_now(guards: Iterable[BudgetGuard]) -> None:
    """`BudgetGuard.release` for each of `guards` that holds something, from code that cannot await
    (a pipeline's `close`); inside a running event loop it cannot wait, and says so in one log line."""
    holding = [guard for guard in guards if guard.holds]
    if not holding:
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(release_all(holding))
        return
    _log.warning("budget.leases_kept", lines=sum(len(guard._held) for guard in holding),
                 reason="closed inside a running event loop: await release_budgets(...) before closing")


async def release_all(guards: Iterable[BudgetGuard]) -> None:
    """`BudgetGuard.release` for each of `guards`, one after another."""
    for guard in guards:
        await guard.release()
