"""Steps for agents.feature: standard bots on one set of embedded stores, each with its scripted model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from pytest_bdd import given, parsers, then, when

from agentloop import (
    AgentLoop,
    BudgetLimit,
    Budgets,
    BudgetScope,
    IncomingMessage,
    LlmReply,
    LlmRequest,
    PipelineError,
    Role,
    Session,
    System,
    Usage,
    history_scope,
    tool,
)
from agentloop.adapters import Stores, open_stores
from agentloop.agents import Handoffs, agent_tool, child_session
from agentloop.ports import Period, UsageFilter
from agentloop.testing import RecordingChannel, ScriptedLLM
from agentloop.testing.bdd import BotUnderTest
from systems import StandardOptions, StandardPipeline, standard_pipeline

OPTIONS = StandardOptions(compaction=False)
SESSION_BUDGET = BudgetLimit(BudgetScope.SESSION, Period.DAY, tokens=1500)


class MeteredLLM:
    """A scripted model whose every reply used 1,000 tokens (900 in, 100 out)."""

    def __init__(self, inner: ScriptedLLM) -> None:
        self.inner, self.model = inner, inner.model

    async def complete(self, request: LlmRequest) -> LlmReply:
        return attrs.evolve(await self.inner.complete(request), usage=Usage(900, 100))


@attrs.define
class Billing:
    """The billing bot: its model, the channel it would answer on, the refunds it made."""

    llm: ScriptedLLM = attrs.Factory(ScriptedLLM)
    channel: RecordingChannel = attrs.Factory(RecordingChannel)
    refunds: list[int] = attrs.Factory(list)
    pipelines: list[StandardPipeline] = attrs.Factory(list)

    def build(self, stores: Stores, *, metered: bool = False, tools: list[Any] | None = None) -> AgentLoop:
        refunds = self.refunds

        @tool(requires_approval=True)
        def refund(order: int) -> str:
            """Refund an order for good."""
            refunds.append(order)
            return f"order {order} refunded"

        llm = MeteredLLM(self.llm) if metered else self.llm
        pipeline = standard_pipeline(llm, self.channel, stores=stores, tools=[refund, *(tools or [])], options=OPTIONS)
        self.pipelines.append(pipeline)
        return pipeline.build()


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Stores]:
    opened = open_stores(tmp_path)
    yield opened
    opened.close()


@pytest.fixture
def billing() -> Billing:
    return Billing()


@pytest.fixture
def built() -> dict[str, Any]:
    """What a `When ... is built` step built, or the error it raised."""
    return {}


def _triage(scripted_llm: ScriptedLLM, channel: RecordingChannel, stores: Stores, billing: Billing, budgets: Budgets) -> BotUnderTest:
    metered = budgets.configured
    child = agent_tool("billing", "Answers questions about invoices, charges and refunds.", billing.build(stores, metered=metered))
    llm = MeteredLLM(scripted_llm) if metered else scripted_llm
    options = attrs.evolve(OPTIONS, budgets=budgets)
    pipeline = standard_pipeline(llm, channel, stores=stores, tools=[child], options=options)
    return BotUnderTest(pipeline.build(), scripted_llm, channel, stores)


@given("a triage bot that may ask the billing bot", target_fixture="bot")
def triage_bot(scripted_llm: ScriptedLLM, recording_channel: RecordingChannel, stores: Stores, billing: Billing) -> BotUnderTest:
    return _triage(scripted_llm, recording_channel, stores, billing, Budgets())


@given("a triage bot with a session budget of 1500 tokens a day that may ask the billing bot", target_fixture="bot")
def budgeted_triage_bot(
    scripted_llm: ScriptedLLM, recording_channel: RecordingChannel, stores: Stores, billing: Billing
) -> BotUnderTest:
    return _triage(scripted_llm, recording_channel, stores, billing, Budgets(limits=(SESSION_BUDGET,), output_reserve=0))


@given(parsers.parse('the billing model replies "{text}"'))
def billing_replies(request: pytest.FixtureRequest, text: str) -> None:
    _billing_llm(request).add(text)


@given(parsers.parse('the billing model calls the tool "{name}" with {arguments}'))
def billing_calls(request: pytest.FixtureRequest, name: str, arguments: str) -> None:
    _billing_llm(request).add(ScriptedLLM.tool_call(name, json.loads(arguments)))


def _billing_llm(request: pytest.FixtureRequest) -> ScriptedLLM:
    """The billing model of the scenario: the help desk's when there is one, else the billing bot's."""
    if "desk" in request.fixturenames:
        desk: Desk = request.getfixturevalue("desk")
        return desk.billing
    billing: Billing = request.getfixturevalue("billing")
    return billing.llm


@given("the billing model fails")
def billing_fails(billing: Billing) -> None:
    billing.llm.add(RuntimeError("the billing model server is down"))


@then(parsers.parse('the billing bot was asked "{question}" in the child session "{session_id}"'))
def billing_asked(bot: BotUnderTest, billing: Billing, question: str, session_id: str) -> None:
    (request,) = billing.llm.requests
    assert request.messages[-1].role is Role.USER and request.messages[-1].content == question
    assert child_session(bot.session, "billing") == Session(session_id, user_id=bot.session.user_id, parent_id=bot.session.id)


def _child_history(bot: BotUnderTest) -> list[str | None]:
    scope = history_scope(child_session(bot.session, "billing"))
    return [m.content for m in asyncio.run(bot.require_stores().sessions.recent(scope, 100))]


@then(parsers.parse('the billing bot\'s history holds "{question}" and "{answer}"'))
def billing_history(bot: BotUnderTest, question: str, answer: str) -> None:
    assert _child_history(bot) == [question, answer]


@then("the billing bot sent nothing to the user")
def billing_silent(billing: Billing) -> None:
    assert billing.channel.sent == [] and billing.channel.streams == []


@then(parsers.parse('the billing model\'s last prompt contains "{text}"'))
def billing_prompt(request: pytest.FixtureRequest, text: str) -> None:
    assert text in "\n".join(m.content or "" for m in _billing_llm(request).requests[-1].messages)


@then(parsers.parse('the billing model was told "{text}"'))
def billing_told(billing: Billing, text: str) -> None:
    assert text in [m.content for m in billing.llm.requests[-1].messages if m.role is Role.TOOL]


@then(parsers.parse('the model was told that the agent "{name}" did not answer'))
def told_no_answer(bot: BotUnderTest, name: str) -> None:
    told = [m.content or "" for m in bot.last_request.messages if m.role is Role.TOOL]
    assert any(t.startswith(f"error: AgentToolError: the agent {name!r} did not answer") for t in told), told
    assert any("the billing model server is down" in t for t in told), told


@then("no refund was made")
def no_refund(billing: Billing) -> None:
    assert billing.refunds == []


@then(parsers.parse("order {order:d} was refunded once"))
def refunded_once(billing: Billing, order: int) -> None:
    assert billing.refunds == [order]


@then(parsers.parse("the session's budget line holds {tokens:d} tokens"))
def budget_line(bot: BotUnderTest, tokens: int) -> None:
    key = SESSION_BUDGET.key(history_scope(bot.session), bot.last.clock.now())
    assert asyncio.run(bot.require_stores().usage.spent(key)).tokens == tokens


@then(parsers.parse("the usage recorded for the user's session is {tokens:d} tokens over {calls:d} model calls"))
def session_usage(bot: BotUnderTest, tokens: int, calls: int) -> None:
    total = asyncio.run(bot.require_stores().usage.total(UsageFilter(session_id=bot.session.id)))
    assert (total.usage.input_tokens + total.usage.output_tokens, total.calls) == (tokens, calls)


@then("nothing is recorded for the billing bot's session")
def child_usage(bot: BotUnderTest) -> None:
    child = child_session(bot.session, "billing")
    assert asyncio.run(bot.require_stores().usage.total(UsageFilter(session_id=child.id))).calls == 0


# -- built pipelines ---------------------------------------------------------------------


def _bot(stores: Stores, asks: list[Any]) -> list[System]:
    """A small bot that may ask the agents `asks`."""
    return list(standard_pipeline(ScriptedLLM(), RecordingChannel(), stores=stores, tools=asks, options=OPTIONS))


@when("a triage bot that asks a billing bot that asks the triage bot is built")
def build_cycle(stores: Stores, built: dict[str, Any]) -> None:
    def triage() -> list[System]:
        return _bot(stores, [agent_tool("billing", "Billing questions.", billing)])

    def billing() -> list[System]:
        return _bot(stores, [agent_tool("triage", "Anything else.", triage)])

    try:
        built["loop"] = AgentLoop(triage())
    except PipelineError as error:
        built["error"] = error


@when(parsers.parse("a chain of {count:d} bots each asking the next is built with max_depth {depth:d}"))
def build_chain(stores: Stores, built: dict[str, Any], count: int, depth: int) -> None:
    def level(index: int) -> list[System]:
        asks = [] if index == count - 1 else [agent_tool(f"bot{index + 1}", "The next bot.", lambda: level(index + 1), max_depth=depth)]
        return _bot(stores, asks)

    try:
        built["loop"] = AgentLoop(level(0))
    except PipelineError as error:
        built["error"] = error


@then(parsers.parse('building fails with "{text}"'))
def building_fails(built: dict[str, Any], text: str) -> None:
    assert "loop" not in built and text in str(built["error"])


# -- the help desk -----------------------------------------------------------------------


@attrs.define
class Desk:
    """A triage bot and a billing bot handing one conversation to each other, on one channel."""

    stores: Stores
    triage: ScriptedLLM = attrs.Factory(ScriptedLLM)
    billing: ScriptedLLM = attrs.Factory(ScriptedLLM)
    channel: RecordingChannel = attrs.Factory(RecordingChannel)
    session: Session = Session("desk-session", user_id="ada")
    handoffs: Handoffs | None = None
    sent: list[list[str]] = attrs.Factory(list)

    def start(self) -> Handoffs:
        desk = Handoffs(["triage", "billing"], first="triage", sessions=self.stores.sessions)
        triage = standard_pipeline(self.triage, self.channel, stores=self.stores, options=OPTIONS,
                                   tools=[desk.transfer_tool("billing", "invoices, charges and refunds")])
        billing = standard_pipeline(self.billing, self.channel, stores=self.stores, options=OPTIONS, tools=[desk.hand_back_tool()])
        desk.add("triage", triage.build()).add("billing", billing.build())
        self.handoffs = desk
        return desk

    def tell(self, text: str) -> None:
        assert self.handoffs is not None
        before = len(self.channel.texts)
        self.handoffs.run_turn_sync(self.session, IncomingMessage(text))
        self.sent.append(self.channel.texts[before:])


@given("a help desk of a triage bot and a billing bot", target_fixture="desk")
def help_desk(stores: Stores) -> Desk:
    desk = Desk(stores)
    desk.start()
    return desk


@given(parsers.parse('the triage model calls the tool "{name}" with {arguments}'))
def triage_calls(desk: Desk, name: str, arguments: str) -> None:
    desk.triage.add(ScriptedLLM.tool_call(name, json.loads(arguments)))


@given(parsers.parse('the triage model replies "{text}"'))
def triage_replies(desk: Desk, text: str) -> None:
    desk.triage.add(text)


@when(parsers.parse('the user tells the desk "{text}"'))
def tell_desk(desk: Desk, text: str) -> None:
    desk.tell(text)


@when("the desk restarts")
def desk_restarts(desk: Desk) -> None:
    desk.start()


@then(parsers.parse('the desk\'s session is held by "{name}"'))
def held_by(desk: Desk, name: str) -> None:
    assert desk.handoffs is not None
    assert asyncio.run(desk.handoffs.holder(desk.session)) == name


@then(parsers.parse('the session\'s history records the handoff from "{source}" to "{target}"'))
def history_records(desk: Desk, source: str, target: str) -> None:
    history = asyncio.run(desk.stores.sessions.recent(history_scope(desk.session), 100))
    assert any((m.content or "").startswith(f"[handoff from {source} to {target}]") for m in history), history


@then(parsers.parse('the desk answers "{text}"'))
def desk_answers(desk: Desk, text: str) -> None:
    assert desk.sent[-1] == [text]


@then("every message of the desk got exactly one answer")
def one_answer_each(desk: Desk) -> None:
    assert desk.sent and all(len(texts) == 1 for texts in desk.sent)
