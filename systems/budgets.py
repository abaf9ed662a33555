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
from datetime import UTC, date

import attrs

from agentloop import AgentContext, Budgets, CallUsage, LlmReply, LlmRequest, Prices, Session, Usage, history_scope
from agentloop._log import get_logger
from agentloop.ports import Charge, UsageStore
from agentloop.tokens import EstimatedTokens, TokenCounter, request_tokens

_log = get_logger("agentloop.budgets")

LINES_KEPT = 4096
"""Ledger lines a guard holds a lease on at once, the most recently used: an older one is given back."""


@attrs.frozen
class Reservation:
    """What one model call reserved on each ledger line, to settle once its usage is known."""

    charges: tuple[Charge, ...]
    tokens: int
    cost: float


@attrs.define
class _Held:
    """What the process holds on one ledger line, per kind: leased and not used yet (below zero:
    used and not yet written). A kind the line has no limit of is only ever used, and written
    whenever the line is."""

    tokens: int = 0
    cost: float = 0.0

    def covers(self, charge: Charge) -> bool:
        """Whether what is held pays for `charge` in every kind the line limits."""
        return (charge.token_limit is None or self.tokens >= charge.tokens) and (charge.cost_limit is None or self.cost >= charge.cost)

    def topped_up(self, charge: Charge, lease: float) -> Charge:
        """The charge that brings each limited kind to `charge` and `lease` of its limit beyond it, and
        writes what an unlimited kind used."""
        tokens = -self.tokens if charge.token_limit is None else max(0, charge.tokens - self.tokens) + int(charge.token_limit * lease)
        cost = -self.cost if charge.cost_limit is None else max(0.0, charge.cost - self.cost) + charge.cost_limit * lease
        return attrs.evolve(charge, tokens=tokens, cost=cost)

    def owed(self, charge: Charge) -> Charge | None:
        """The charge that writes what was used beyond what is held, if a limited kind ran short."""
        if not ((charge.token_limit is not None and self.tokens < 0) or (charge.cost_limit is not None and self.cost < 0)):
            return None
        return attrs.evolve(charge, tokens=max(0, -self.tokens), cost=max(0.0, -self.cost))

    def unwritten(self, charge: Charge) -> Charge | None:
        """The charge that writes everything held back to the line (without a lease, each settlement)."""
        return attrs.evolve(charge, tokens=-self.tokens, cost=-self.cost) if self.tokens or self.cost else None

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
        self._held: OrderedDict[str, _Held] = OrderedDict()
        self._keys: dict[tuple[Session, date], tuple[str, ...]] = {}
        self._lock = threading.Lock()  # turns on several threads' loops may share a guard

    def _line_keys(self, ctx: AgentContext) -> tuple[str, ...]:
        """The ledger line of each limit for this turn (its session and day), remembered per session and day."""
        at = ctx.clock.now()
        cached = (ctx.session, at.astimezone(UTC).date())
        keys = self._keys.get(cached)
        if keys is None:
            if len(self._keys) >= LINES_KEPT:
                self._keys.clear()
            scope = history_scope(ctx.session, self.company_id)
            keys = self._keys[cached] = tuple(limit.key(scope, at) for limit in self.budgets.limits)
        return keys

    def _charges(self, ctx: AgentContext, tokens: int, cost: float) -> list[Charge]:
        return [
            Charge(key, tokens, cost, limit.tokens, limit.cost)
            for key, limit in zip(self._line_keys(ctx), self.budgets.limits, strict=True)
        ]

    def _refusal(self, ctx: AgentContext, refused: Charge) -> str:
        limit = self.budgets.limits[self._line_keys(ctx).index(refused.key)]
        return f"{limit.name} is used up"

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

    def _line(self, key: str) -> _Held:
        """What is held on line `key`, the line now the most recently used one (the caller holds the lock)."""
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = _Held()
        else:
            self._held.move_to_end(key)
        return held

    async def before_call(self, ctx: AgentContext, used: Usage, request: LlmRequest, model: str | None) -> Reservation | str:
        """Reserve the call `request` is about to make (its prompt's tokens and the answer's reserve);
        the reservation, or why the turn stops (a budget it would pass, or one used up)."""
        estimate = request_tokens(self.tokens, request.messages, request.tools, model) + self.budgets.output_reserve
        refusal = self._turn_refusal(used, estimate)
        if refusal is not None:
            return refusal
        if not self.budgets.limits:
            return Reservation((), estimate, 0.0)
        cost = self._cost(model, Usage(estimate - self.budgets.output_reserve, self.budgets.output_reserve), ctx)
        charges = self._charges(ctx, estimate, cost)
        refused = await self._take(charges)
        return self._refusal(ctx, refused) if refused is not None else Reservation(tuple(charges), estimate, cost)

    async def _take(self, charges: Sequence[Charge]) -> Charge | None:
        """Take `charges` from what is held, topping the lines that run short up on the store first (with
        a lease, else, when that does not fit, with what they need); None, or the first charge that does not fit."""
        refused: Charge | None = None
        for lease in dict.fromkeys((self.budgets.lease, 0.0)):
            with self._lock:
                lines = [self._line(charge.key) for charge in charges]
                short = [line.topped_up(charge, lease) for line, charge in zip(lines, charges, strict=True) if not line.covers(charge)]
                if not short:
                    for line, charge in zip(lines, charges, strict=True):
                        line.add(-charge.tokens, -charge.cost)
                    return None
            assert self.usage is not None  # __init__ refuses limits without a store
            refused = await self.usage.reserve(short)
            if refused is None:
                with self._lock:
                    for top in short:
                        self._line(top.key).add(top.tokens, top.cost)
                    for charge in charges:
                        self._line(charge.key).add(-charge.tokens, -charge.cost)
                await self._give_back_the_oldest()
                return None
        return refused

    async def _give_back_the_oldest(self) -> None:
        """Give back the leases of the lines used longest ago beyond `LINES_KEPT`."""
        with self._lock:
            dropped = [self._held.popitem(last=False) for _ in range(len(self._held) - LINES_KEPT)]
        if dropped:
            await self._write([(key, held) for key, held in dropped])

    async def _write(self, lines: Iterable[tuple[str, _Held]]) -> None:
        """Put what `lines` hold back on the ledger (a lease given back, a use not yet written)."""
        charges = [Charge(key, -held.tokens, -held.cost) for key, held in lines if held.tokens or held.cost]
        if charges and self.usage is not None:
            await self.usage.spend(charges)

    async def _use(self, charges: Iterable[Charge], tokens: int, cost: float) -> None:
        """Count `tokens` and `cost` used on each line of `charges` after giving back what each reserved;
        what a line's holding does not pay for is written to the store at once."""
        owed: list[Charge] = []
        with self._lock:
            for charge in charges:
                line = self._line(charge.key)
                line.add(charge.tokens - tokens, charge.cost - cost)
                short = line.owed(charge) if self.budgets.lease else line.unwritten(charge)
                if short is not None:
                    line.add(short.tokens, short.cost)
                    owed.append(short)
        if owed:
            assert self.usage is not None
            await self.usage.spend(owed)

    async def settle(self, ctx: AgentContext, reservation: Reservation, usage: Usage | None, model: str | None) -> None:
        """Put what the call used in place of what it reserved (nothing used: the reservation is given back)."""
        if not reservation.charges or self.usage is None:
            return
        tokens = 0 if usage is None else usage.input_tokens + usage.output_tokens
        cost = 0.0 if usage is None else self._cost(model, usage, ctx)
        await self._use(reservation.charges, tokens, cost)

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
        await self._use(self._charges(ctx, 0, 0.0), tokens, cost)

    async def before_tools(self, ctx: AgentContext, used: Usage) -> str | None:
        """Why a tool step may not run (a budget used up), or None. A line the process holds some of
        is not used up; the others are asked of the store."""
        refusal = self._turn_refusal(used, 0)
        if refusal is not None or not self.budgets.limits:
            return refusal
        with self._lock:
            unheld = [charge for charge in self._charges(ctx, 0, 0.0) if not _holds_some(self._line(charge.key), charge)]
        if not unheld:
            return None
        assert self.usage is not None
        refused = await self.usage.reserve(unheld)
        return None if refused is None else self._refusal(ctx, refused)

    @property
    def holds(self) -> bool:
        """Whether the guard holds a lease, or a use not yet written, on some ledger line."""
        return any(held.tokens or held.cost for held in self._held.values())

    async def release(self) -> None:
        """Give back every lease this guard holds and write what it used and has not written: when the
        process stops, so that other processes may spend what it did not. A store that fails here is
        logged (budget.leases_kept): the ledger then counts the leases until their period ends."""
        with self._lock:
            lines = list(self._held.items())
            self._held.clear()
        try:
            await self._write(lines)
        except Exception as error:  # a store out of reach as the process stops: the leases stay until their period ends
            _log.warning("budget.leases_kept", lines=len(lines), error=f"{type(error).__name__}: {error}")


def _holds_some(held: _Held, charge: Charge) -> bool:
    """Whether the process holds some of every kind the line limits."""
    return (charge.token_limit is None or held.tokens > 0) and (charge.cost_limit is None or held.cost > 0)


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
