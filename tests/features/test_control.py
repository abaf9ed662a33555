"""Steps for control.feature."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from pytest_bdd import given, parsers, scenarios, then, when

from agentloop import (
    DEFAULT_COMPANY,
    BudgetLimit,
    Budgets,
    BudgetScope,
    FinishReason,
    IncomingMessage,
    LlmReply,
    LlmRequest,
    MidTurnPolicy,
    ModelPrice,
    Prices,
    Session,
    TurnInProgressError,
    Usage,
    history_scope,
)
from agentloop.adapters.llm.scripted import ScriptedLLM
from agentloop.ports import Period, UsageFilter
from agentloop.testing import RecordingChannel
from systems import StandardOptions, StandardPipeline, standard_pipeline
from systems.outcome import DEFAULT_STOP_TEXTS

from mid_turn_kit import HeldModel, lookup_tool

from control_model_steps import *  # noqa: F403  (the steps of a model that fails and of a long session)

scenarios("control.feature")

SESSION = Session("control", user_id="u1")


@attrs.define
class MidTurnBot:
    """A bot whose model is held on its first call, and what its two turns gave."""

    pipeline: StandardPipeline
    model: HeldModel
    channel: RecordingChannel
    looked: list[str]
    results: dict[str, Any] = attrs.Factory(dict)


@pytest.fixture
def mid_turn_bots() -> Iterator[list[MidTurnBot]]:
    bots: list[MidTurnBot] = []
    yield bots
    for bot in bots:
        bot.pipeline.close()


@given(parsers.parse("a bot whose mid-turn policy is {policy}"), target_fixture="bot")
def _bot(policy: str, tmp_path: Path, mid_turn_bots: list[MidTurnBot]) -> MidTurnBot:
    model, channel, looked = HeldModel(), RecordingChannel(), []
    pipeline = standard_pipeline(model, channel, data_dir=tmp_path, tools=[lookup_tool(looked)])
    bot = MidTurnBot(pipeline, model, channel, looked)
    mid_turn_bots.append(bot)
    bot.results["policy"] = MidTurnPolicy(policy)
    return bot


@when(parsers.parse('the user says "{first}" and, while the bot works on it, "{second}"'))
def _two_messages(bot: MidTurnBot, first: str, second: str) -> None:
    loop = bot.pipeline.build()
    loop.mid_turn = bot.results["policy"]

    async def send() -> list[Any]:
        running = asyncio.create_task(loop.run_turn(SESSION, IncomingMessage(first)))
        await asyncio.wait_for(bot.model.called.wait(), 30)  # a guard against a hang, not a timing check
        newer = asyncio.create_task(loop.run_turn(SESSION, IncomingMessage(second)))
        await asyncio.sleep(0)  # the newer message reaches the session
        bot.model.release.set()
        return await asyncio.gather(running, newer, return_exceptions=True)

    bot.results[first], bot.results[second] = asyncio.run(send())


@then(parsers.parse('the turn of "{text}" finishes with {reason}'))
def _finishes(bot: MidTurnBot, text: str, reason: str) -> None:
    assert bot.results[text].turn_outcome.finish_reason is FinishReason[reason]


@then(parsers.parse("the lookup tool ran {times:d} time"))
@then(parsers.parse("the lookup tool ran {times:d} times"))
def _tool_ran(bot: MidTurnBot, times: int) -> None:
    assert len(bot.looked) == times


@then(parsers.parse('the answer to "{text}" is "{answer}"'))
def _answer(bot: MidTurnBot, text: str, answer: str) -> None:
    assert bot.results[text].turn_outcome.assistant_text == answer
    assert answer in bot.channel.texts


@then(parsers.parse('"{text}" is refused because a turn is still running'))
def _refused(bot: MidTurnBot, text: str) -> None:
    error = bot.results[text]
    assert isinstance(error, TurnInProgressError) and "still running" in str(error)


@then(parsers.parse('what "{text}" streamed was withdrawn, never sent as an answer'))
def _withdrawn(bot: MidTurnBot, text: str) -> None:
    (stream, *_) = bot.channel.streams
    assert stream.shown and stream.aborted is not None and stream.closed is None
    assert stream.shown not in bot.channel.texts
    assert bot.results[text].turn_outcome.assistant_text is None


def _history(bot: MidTurnBot) -> list[str]:
    assert bot.pipeline.stores is not None
    return [str(m.content) for m in asyncio.run(bot.pipeline.stores.sessions.recent(history_scope(SESSION), 20))]


@then(parsers.parse('history holds "{kept}" and not "{missing}"'))
def _history_without(bot: MidTurnBot, kept: str, missing: str) -> None:
    history = _history(bot)
    assert kept in history and missing not in history


@then(parsers.parse('history holds "{a}", "{b}" and "{c}", in that order'))
def _history_in_order(bot: MidTurnBot, a: str, b: str, c: str) -> None:
    assert _history(bot) == [a, b, c]


# ---- Budgets ----

PRICED = Prices({"m": ModelPrice(input=100.0, output=0.0)})
"""$0.10 for a call of 1,000 input tokens."""
DAILY_CAP = BudgetLimit(BudgetScope.TENANT, Period.DAY, cost=0.25)


def _looking(request: LlmRequest) -> LlmReply:
    return attrs.evolve(ScriptedLLM.tool_call("lookup"), usage=Usage(1000, 0), model="m")


def _answering(request: LlmRequest) -> LlmReply:
    return LlmReply("done", usage=Usage(1000, 0), model="m")


@given("a bot with a budget of 2000 tokens a turn, whose model asks for a lookup on every call", target_fixture="budget_bot")
def _budget_bot(tmp_path: Path, mid_turn_bots: list[MidTurnBot]) -> MidTurnBot:
    looked: list[str] = []
    model, channel = ScriptedLLM(_looking, model="m"), RecordingChannel()
    options = StandardOptions(budgets=Budgets(turn_tokens=2000, output_reserve=100), prices=PRICED, compaction=False)
    pipeline = standard_pipeline(model, channel, data_dir=tmp_path, tools=[lookup_tool(looked)], options=options)
    bot = MidTurnBot(pipeline, HeldModel(), channel, looked)
    bot.results["model"] = model
    mid_turn_bots.append(bot)
    return bot


@when(parsers.parse('the user asks "{text}"'))
def _asks(budget_bot: MidTurnBot, text: str) -> None:
    budget_bot.results["turn"] = budget_bot.pipeline.build().run_turn_sync(SESSION, IncomingMessage(text))


@then(parsers.parse("the turn finishes with {reason} after {calls:d} model calls and {lookups:d} lookup"))
def _budget_stop(budget_bot: MidTurnBot, reason: str, calls: int, lookups: int) -> None:
    assert budget_bot.results["turn"].turn_outcome.finish_reason is FinishReason[reason]
    assert len(budget_bot.results["model"].requests) == calls and len(budget_bot.looked) == lookups


@then("the user is told the budget is used up")
def _told(budget_bot: MidTurnBot) -> None:
    assert budget_bot.channel.texts == [DEFAULT_STOP_TEXTS[FinishReason.BUDGET_EXCEEDED]]


@then(parsers.parse('history holds "{text}" with no answer'))
def _no_answer(budget_bot: MidTurnBot, text: str) -> None:
    assert _history(budget_bot) == [text]


@attrs.define
class TwoWorkers:
    """Two pipelines of one bot on one PostgreSQL database, as two worker processes have, and their turns."""

    pipelines: list[StandardPipeline]
    reasons: list[FinishReason] = attrs.Factory(list)


@pytest.fixture
def two_workers() -> Iterator[list[StandardPipeline]]:
    opened: list[StandardPipeline] = []
    yield opened
    for pipeline in opened:
        pipeline.close()


@given("two workers of one bot on PostgreSQL, with a daily cost cap of $0.25 a tenant", target_fixture="workers")
def _workers(postgres_url: str, two_workers: list[StandardPipeline]) -> TwoWorkers:
    options = StandardOptions(budgets=Budgets(limits=(DAILY_CAP,), output_reserve=0), prices=PRICED, compaction=False)
    for _ in range(2):
        two_workers.append(standard_pipeline(ScriptedLLM(_answering, model="m"), RecordingChannel(), data_dir=postgres_url, options=options))
    return TwoWorkers(two_workers)


TENANT = {"org_id": "acme-org", "team_id": "support"}


@when(parsers.parse("users of one tenant send {count:d} messages, each to the other worker than the last"))
def _send_alternately(workers: TwoWorkers, count: int) -> None:
    loops = [pipeline.build() for pipeline in workers.pipelines]
    for i in range(count):
        ctx = loops[i % 2].run_turn_sync(Session(f"s{i}", user_id=f"user{i}", **TENANT), IncomingMessage("hello"))
        workers.reasons.append(ctx.turn_outcome.finish_reason)


@then(parsers.parse("{answered:d} turns are answered and {stopped:d} finish with BUDGET_EXCEEDED"))
def _counted_turns(workers: TwoWorkers, answered: int, stopped: int) -> None:
    assert workers.reasons == [FinishReason.SUCCESS] * answered + [FinishReason.BUDGET_EXCEEDED] * stopped


@then("the tenant spent at most one call beyond its cap")
def _within_one_call(workers: TwoWorkers) -> None:
    stores = workers.pipelines[1].stores
    assert stores is not None
    total = asyncio.run(stores.usage.total(UsageFilter(company_id=DEFAULT_COMPANY, **TENANT)))
    assert DAILY_CAP.cost is not None and total.known_cost is not None
    assert DAILY_CAP.cost < total.known_cost <= DAILY_CAP.cost + 0.10 + 1e-9


@then("a user of another tenant is still answered")
def _other_tenant(workers: TwoWorkers) -> None:
    ctx = workers.pipelines[0].build().run_turn_sync(Session("elsewhere", user_id="x", org_id="other"), IncomingMessage("hello"))
    assert ctx.turn_outcome.finish_reason is FinishReason.SUCCESS
