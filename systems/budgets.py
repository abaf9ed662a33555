"""The tool loop's budget checks (`BudgetGuard`): a model call reserves its estimate on the usage
store's ledger before it is made and settles to what it used after; a tool step goes ahead only
while no budget is used up (docs/adr/0025-budgets.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import attrs

from agentloop import AgentContext, Budgets, CallUsage, LlmReply, LlmRequest, Prices, Usage, history_scope
from agentloop._log import get_logger
from agentloop.ports import Charge, UsageStore
from agentloop.tokens import EstimatedTokens, TokenCounter, request_tokens

_log = get_logger("agentloop.budgets")


@attrs.frozen
class Reservation:
    """What one model call reserved on each ledger line, to settle once its usage is known."""

    charges: tuple[Charge, ...]
    tokens: int
    cost: float


class BudgetGuard:
    """Checks `budgets` for the turns of one tool loop; made only when a budget is set, so a bot
    without one reads nothing. Limits per session or tenant count on `usage`'s ledger, in the
    session's tenant chain within `company_id`; dollars come from `prices`. A model whose price is
    unknown is counted in tokens only, and each such call is logged: its cost is never taken as zero quietly."""

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

    def _charges(self, ctx: AgentContext, tokens: int, cost: float) -> list[Charge]:
        scope, at = history_scope(ctx.session, self.company_id), ctx.clock.now()
        return [Charge(limit.key(scope, at), tokens, cost, limit.tokens, limit.cost) for limit in self.budgets.limits]

    def _refusal(self, ctx: AgentContext, refused: Charge) -> str:
        scope, at = history_scope(ctx.session, self.company_id), ctx.clock.now()
        limit = next(limit for limit in self.budgets.limits if limit.key(scope, at) == refused.key)
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

    async def before_call(self, ctx: AgentContext, used: Usage, request: LlmRequest, model: str | None) -> Reservation | str:
        """Reserve the call `request` is about to make (its prompt's tokens and the answer's reserve);
        the reservation, or why the turn stops (a budget it would pass, or one used up)."""
        estimate = request_tokens(self.tokens, request.messages, request.tools, model) + self.budgets.output_reserve
        refusal = self._turn_refusal(used, estimate)
        if refusal is not None:
            return refusal
        if not self.budgets.limits:
            return Reservation((), estimate, 0.0)
        assert self.usage is not None  # __init__ refuses limits without a store
        cost = self._cost(model, Usage(estimate - self.budgets.output_reserve, self.budgets.output_reserve), ctx)
        charges = self._charges(ctx, estimate, cost)
        refused = await self.usage.reserve(charges)
        return self._refusal(ctx, refused) if refused is not None else Reservation(tuple(charges), estimate, cost)

    async def settle(self, ctx: AgentContext, reservation: Reservation, usage: Usage | None, model: str | None) -> None:
        """Put what the call used in place of what it reserved (nothing used: the reservation is given back)."""
        if not reservation.charges or self.usage is None:
            return
        tokens = 0 if usage is None else usage.input_tokens + usage.output_tokens
        cost = 0.0 if usage is None else self._cost(model, usage, ctx)
        await self.usage.spend([attrs.evolve(c, tokens=tokens - c.tokens, cost=cost - c.cost) for c in reservation.charges])

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
        await self.usage.spend(self._charges(ctx, tokens, cost))

    async def before_tools(self, ctx: AgentContext, used: Usage) -> str | None:
        """Why a tool step may not run (a budget used up), or None."""
        refusal = self._turn_refusal(used, 0)
        if refusal is not None or not self.budgets.limits:
            return refusal
        assert self.usage is not None
        refused = await self.usage.reserve(self._charges(ctx, 0, 0.0))
        return None if refused is None else self._refusal(ctx, refused)

