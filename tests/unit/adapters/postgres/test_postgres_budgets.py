"""Budgets on a real PostgreSQL: concurrent turns of one tenant, through two store instances (as
two workers have), never spend past the tenant's budget by more than one call's worth."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime

import pytest

from agentloop import (
    DEFAULT_COMPANY,
    BudgetLimit,
    Budgets,
    BudgetScope,
    EstimatedTokens,
    FinishReason,
    IncomingMessage,
    LlmReply,
    LlmRequest,
    Session,
    Usage,
    history_scope,
)
from agentloop.adapters import open_stores
from agentloop.adapters.llm.scripted import ScriptedLLM
from agentloop.ports import Charge, Period, Spent, UsageFilter, UsageGroup
from agentloop.testing import RecordingChannel
from agentloop.testing.stores._kit import at_once
from agentloop.tokens import request_tokens
from systems import StandardOptions, release_budgets, standard_pipeline

LIMIT = 4000
RESERVE = 200


def honest_model(seed: int) -> ScriptedLLM:
    """A model whose calls use what the budget estimates for their prompt and up to `RESERVE` tokens of answer,
    taking a few event-loop turns each so that many calls are in flight at once."""
    chance, counter = random.Random(seed), EstimatedTokens()

    async def reply(request: LlmRequest) -> LlmReply:
        for _ in range(chance.randint(0, 5)):
            await asyncio.sleep(0)
        used = Usage(request_tokens(counter, request.messages, request.tools), chance.randint(0, RESERVE))
        return LlmReply("done", usage=used)

    return ScriptedLLM(reply)


@pytest.mark.parametrize("lease", [0.01, 0.25], ids=["default lease", "quarter leases"])
def test_i16_concurrent_turns_of_one_tenant_on_two_workers_never_overspend_by_more_than_one_call(postgres_url: str, lease: float) -> None:
    """I16: 2 x 30 turns of one tenant at once, through two store instances, against a tenant's daily token budget;
    with leases of a quarter of it, the second worker finds the first's lease on the line and leases what a call needs."""
    budgets = Budgets(limits=(BudgetLimit(BudgetScope.TENANT, Period.DAY, tokens=LIMIT),), output_reserve=RESERVE, lease=lease)
    options = StandardOptions(budgets=budgets, compaction=False)

    async def turns(worker: int) -> list[FinishReason]:
        with open_stores(postgres_url, bot="bot") as stores:
            pipeline = standard_pipeline(honest_model(worker), RecordingChannel(), stores=stores, options=options)
            loop = pipeline.build()
            sessions = [Session(f"w{worker}-s{i}", user_id=f"u{i}", org_id="o1", team_id="t1") for i in range(30)]
            results = await asyncio.gather(*(loop.run_turn(s, IncomingMessage("hello")) for s in sessions))
            await release_budgets(pipeline.systems)  # as a worker does when it stops
        return [ctx.turn_outcome.finish_reason for ctx in results]

    async def both() -> list[FinishReason]:
        first, second = await asyncio.gather(turns(1), turns(2))
        return first + second

    reasons = asyncio.run(both())
    with open_stores(postgres_url, bot="bot") as stores:
        tenant = Session("any", org_id="o1", team_id="t1")
        key = budgets.limits[0].key(history_scope(tenant, DEFAULT_COMPANY), datetime.now(UTC))
        ledger = asyncio.run(stores.usage.spent(key))
        where = UsageFilter(company_id=DEFAULT_COMPANY, org_id="o1", team_id="t1")
        recorded = asyncio.run(stores.usage.total(where))
        per_turn = asyncio.run(stores.usage.report(where, UsageGroup.SESSION))  # one call a session
    answered = reasons.count(FinishReason.SUCCESS)
    assert 0 < answered < len(reasons) and set(reasons) == {FinishReason.SUCCESS, FinishReason.BUDGET_EXCEEDED}
    spent = recorded.usage.input_tokens + recorded.usage.output_tokens
    largest_call = max(line.total.usage.input_tokens + line.total.usage.output_tokens for line in per_turn)
    assert ledger.tokens == spent, "each call's reservation settles to what it used, and each worker gives back its lease"
    assert spent <= LIMIT + largest_call


def test_i16_reservations_through_two_store_instances_at_once_stop_at_the_limit(postgres_url: str) -> None:
    with open_stores(postgres_url, bot="bot") as first, open_stores(postgres_url, bot="bot") as second:
        instances = [first.usage, second.usage]
        taken = at_once(lambda i: instances[i % 2].reserve([Charge("tenant:acme:day", 7, 0.5, 100, 6.0)]), range(60))
        assert taken.count(None) == 12  # $6 for twelve: the cost limit binds before the tokens'
        assert asyncio.run(first.usage.spent("tenant:acme:day")) == Spent(84, 6.0)
