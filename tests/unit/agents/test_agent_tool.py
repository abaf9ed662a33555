"""agent_tool: a child bot's turn inside the parent's tool call, captured, limited and built safely."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentloop import (
    AgentLoop,
    IncomingMessage,
    LlmReply,
    LlmResponse,
    PipelineError,
    Session,
    Tool,
    ToolExecutions,
    TurnOutcome,
    TurnUsage,
    Usage,
    history_scope,
    tool,
)
from agentloop.adapters import Stores, open_note_taking, open_stores
from agentloop.agents import AgentToolError, agent_tool, child_session
from agentloop.notes import DistillationSettings, DistillationStatus
from agentloop.testing import PromptWriter, RecordingChannel, ScriptedLLM
from systems import StandardOptions, ToolLoopSystem, standard_pipeline
from systems.input import InputSanitizationSystem
from systems.notes import add_note_taking

OPTIONS = StandardOptions(compaction=False)
NOTE = """## Context
Invoice totals are asked of the billing bot.

## Solution
Ask billing, which looks the invoice up.

## Key Patterns
Delegate invoices to billing.

## Code Examples
None

## Tags
billing
"""


@tool
def lookup_invoice(number: int) -> str:
    """The invoice's total."""
    return f"invoice {number}: 40 euros"


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Stores]:
    opened = open_stores(tmp_path)
    yield opened
    opened.close()


def billing_loop(stores: Stores, llm: ScriptedLLM) -> AgentLoop:
    return standard_pipeline(llm, RecordingChannel(), stores=stores, tools=[lookup_invoice], options=OPTIONS).build()


def test_a_child_bots_executions_are_captured_under_the_parent_execution_and_distilled_as_one_tree(stores: Stores) -> None:
    child_llm = ScriptedLLM([ScriptedLLM.tool_call("lookup_invoice", {"number": 12}), "Invoice 12 totals 40 euros."])
    parent_llm = ScriptedLLM([ScriptedLLM.tool_call("billing", {"question": "What does invoice 12 total?"}), "40 euros."])
    distiller = ScriptedLLM([NOTE])
    settings = DistillationSettings(min_executions=2, min_duration_s=0.0)
    session = Session("ada-1", user_id="ada")
    with open_note_taking(stores, distiller, distillation=settings) as note_taking:
        billing = agent_tool("billing", "Answers invoice questions.", billing_loop(stores, child_llm))
        pipeline = standard_pipeline(parent_llm, RecordingChannel(), stores=stores, tools=[billing], options=OPTIONS)
        loop = add_note_taking(pipeline, note_taking).build()
        ctx = loop.run_turn_sync(session, IncomingMessage("What does invoice 12 total?"))
        result = asyncio.run(note_taking.end_session(session, success=True))
    assert ctx.require(TurnOutcome).assistant_text == "40 euros."
    trajectory = asyncio.run(stores.trajectories.load(session.id, history_scope(session)))
    asked, looked_up = trajectory.executions
    assert (asked.tool_name, asked.parent_id, asked.result) == ("billing", None, "Invoice 12 totals 40 euros.")
    assert (looked_up.tool_name, looked_up.parent_id, looked_up.session_id) == ("lookup_invoice", asked.id, session.id)
    assert looked_up.context_snapshot["inner_session_id"] == child_session(session, "billing").id
    prompt = distiller.requests[0].messages[-1].content or ""
    assert "### Step 2: lookup_invoice\nRan inside step 1" in prompt
    assert result.status is DistillationStatus.STORED


def bare(llm: ScriptedLLM, *tools: Tool) -> AgentLoop:
    """A bot of only the tool loop and what it reads: no stores."""
    return AgentLoop([InputSanitizationSystem(), PromptWriter(), ToolLoopSystem(llm, tools)])


def test_the_childs_model_calls_join_the_parent_turns_usage() -> None:
    child = bare(ScriptedLLM([LlmReply(content="40 euros.", usage=Usage(300, 20))]))
    billing = agent_tool("billing", "Answers invoice questions.", child)
    parent_llm = ScriptedLLM([
        LlmReply(tool_calls=ScriptedLLM.tool_call("billing", {"question": "invoice 12?"}).tool_calls, usage=Usage(100, 10)),
        LlmReply(content="It is 40 euros.", usage=Usage(200, 10)),
    ])
    ctx = bare(parent_llm, billing).run_turn_sync(Session("s"), IncomingMessage("invoice 12?"))
    (asked,) = ctx.require(ToolExecutions).executions
    assert asked.result == "40 euros." and ctx.require(LlmResponse).text == "It is 40 euros."
    assert [call.usage for call in ctx.require(TurnUsage).calls] == [Usage(100, 10), Usage(300, 20), Usage(200, 10)]
    assert ctx.require(LlmResponse).usage == Usage(600, 40)


def test_an_agent_asked_more_often_than_max_calls_in_one_turn_fails_the_extra_call(stores: Stores) -> None:
    child_llm = ScriptedLLM(["one", "two"])
    billing = agent_tool("billing", "Answers.", billing_loop(stores, child_llm), max_calls=1)
    calls = [ScriptedLLM.tool_call("billing", {"question": "a"}), ScriptedLLM.tool_call("billing", {"question": "b"}), "done"]
    pipeline = standard_pipeline(ScriptedLLM(calls), RecordingChannel(), stores=stores, tools=[billing], options=OPTIONS)
    ctx = pipeline.build().run_turn_sync(Session("s"), IncomingMessage("ask twice"))
    first, second = ctx.require(ToolExecutions).executions
    assert first.result == "one"
    assert second.error is not None and "was asked 1 times this turn, its limit (max_calls)" in second.error
    assert child_llm.remaining == 1


def test_a_child_that_answers_nothing_raises_an_agent_tool_error_naming_its_failures() -> None:
    billing = agent_tool("billing", "Answers.", bare(ScriptedLLM([RuntimeError("the model server is down")])))
    with pytest.raises(AgentToolError, match="the agent 'billing' did not answer: RuntimeError: the model server is down"):
        asyncio.run(billing.invoke({"question": "hi"}))


def test_a_chain_deeper_than_max_depth_at_run_time_fails_the_deep_call() -> None:
    """A bot given built cannot be checked when the tool is made; its depth is checked when it runs."""
    leaf = agent_tool("leaf", "The leaf.", bare(ScriptedLLM(["leaf"])), max_depth=1)
    middle_llm = ScriptedLLM([ScriptedLLM.tool_call("leaf", {"question": "?"}), "the leaf is out of reach"])
    middle = agent_tool("middle", "The middle.", bare(middle_llm, leaf))
    top = bare(ScriptedLLM([ScriptedLLM.tool_call("middle", {"question": "?"}), "top"]), middle)
    ctx = top.run_turn_sync(Session("s"), IncomingMessage("go"))
    (asked,) = ctx.require(ToolExecutions).executions
    assert asked.result == "the leaf is out of reach" and ctx.require(LlmResponse).text == "top"
    told = [m.content for m in middle_llm.requests[-1].messages if m.tool_call_id is not None]
    assert told == ["error: AgentToolError: the agent 'leaf' would run 2 bots deep, more than max_depth=1"]


def test_a_bot_that_builds_itself_as_its_own_agent_is_refused() -> None:
    def looping() -> list[object]:
        return [agent_tool("me", "Myself.", looping)]

    with pytest.raises(PipelineError, match="the agent tools form a cycle: me -> me"):
        looping()


def test_a_factory_that_returns_no_bot_is_refused_with_what_it_returned() -> None:
    with pytest.raises(PipelineError, match="its factory returned int"):
        agent_tool("billing", "Answers.", lambda: 3)


def test_child_sessions_keep_the_tenant_chain_and_link_to_the_parent() -> None:
    parent = Session("s1", user_id="ada", project_id="p", team_id="t", org_id="o", channel="http")
    child = child_session(parent, "billing")
    assert child == Session("s1/billing", user_id="ada", project_id="p", team_id="t", org_id="o", channel="http", parent_id="s1")
    assert child_session(parent, "billing") == child


def test_a_childs_approval_fails_the_call_when_the_parent_keeps_no_approvals(stores: Stores) -> None:
    refunded: list[int] = []

    @tool(requires_approval=True)
    def refund(order: int) -> None:
        """Refund an order."""
        refunded.append(order)

    child_llm = ScriptedLLM([ScriptedLLM.tool_call("refund", {"order": 7})])
    child = AgentLoop([InputSanitizationSystem(), PromptWriter(), ToolLoopSystem(child_llm, [refund], approvals=stores.approvals)])
    parent_llm = ScriptedLLM([ScriptedLLM.tool_call("billing", {"question": "refund 7"}), "I cannot refund it from here."])
    ctx = bare(parent_llm, agent_tool("billing", "Refunds.", child)).run_turn_sync(Session("s"), IncomingMessage("refund 7"))
    told = [m.content for m in parent_llm.requests[-1].messages if m.tool_call_id is not None]
    assert told == ["error: it asked for the user's approval, but this bot keeps no approvals (pass approvals=...)"]
    assert ctx.require(LlmResponse).text == "I cannot refund it from here." and refunded == []


def test_a_call_beside_the_one_a_child_holds_back_keeps_its_result_across_the_approval(stores: Stores) -> None:
    @tool(requires_approval=True)
    def refund(order: int) -> str:
        """Refund an order."""
        return f"order {order} refunded"

    child_llm = ScriptedLLM([ScriptedLLM.tool_call("refund", {"order": 7}), "Order 7 is refunded."])
    child = standard_pipeline(child_llm, RecordingChannel(), stores=stores, tools=[refund], options=OPTIONS)
    both = LlmReply(tool_calls=(
        *ScriptedLLM.tool_call("lookup_invoice", {"number": 7}).tool_calls,
        *ScriptedLLM.tool_call("billing", {"question": "refund order 7"}).tool_calls,
    ))
    parent_llm = ScriptedLLM([both, "Refunded order 7 (40 euros)."])
    tools = [lookup_invoice, agent_tool("billing", "Refunds.", child)]
    loop = standard_pipeline(parent_llm, RecordingChannel(), stores=stores, tools=tools, options=OPTIONS).build()
    session = Session("s", user_id="ada")
    asked = loop.run_turn_sync(session, IncomingMessage("refund order 7")).require(TurnOutcome).approval
    assert asked is not None and (asked.tool, asked.arguments, asked.session_id) == ("refund", {"order": 7}, "s")
    answered = loop.run_turn_sync(session, IncomingMessage.approval(asked.approval_id, approved=True))
    told = [m.content for m in parent_llm.requests[-1].messages if m.tool_call_id is not None]
    assert told == ["invoice 7: 40 euros", "Order 7 is refunded."]
    assert answered.require(TurnOutcome).assistant_text == "Refunded order 7 (40 euros)."


@pytest.mark.parametrize("approve", [True, False])
def test_an_agent_tool_that_needs_approval_itself_runs_the_child_once_approved_and_tells_a_denial(tmp_path: Path, approve: bool) -> None:
    """The tool's own approval is the parent's to decide: approved, the child answers; denied, the model is told so."""
    import attrs

    from agentloop import IncomingMessage, Session, TurnOutcome
    from agentloop.adapters import open_stores
    from agentloop.agents import agent_tool
    from agentloop.testing import RecordingChannel, ScriptedLLM
    from systems import StandardOptions, standard_pipeline

    options = StandardOptions(compaction=False)
    with open_stores(tmp_path) as stores:
        child_llm = ScriptedLLM(["child answer"])
        child = standard_pipeline(child_llm, RecordingChannel(), stores=stores, tools=[], options=options)
        billing = attrs.evolve(agent_tool("billing", "Billing questions.", child), requires_approval=True)
        parent_llm = ScriptedLLM([ScriptedLLM.tool_call("billing", {"question": "q"}), "done"])
        loop = standard_pipeline(parent_llm, RecordingChannel(), stores=stores, tools=[billing], options=options).build()
        session = Session("s", user_id="ada")
        asked = loop.run_turn_sync(session, IncomingMessage("go")).require(TurnOutcome).approval
        assert asked is not None and asked.tool == "billing"
        loop.run_turn_sync(session, IncomingMessage.approval(asked.approval_id, approved=approve))
    told = [m.content for m in parent_llm.requests[-1].messages if m.tool_call_id is not None]
    if approve:
        assert told == ["child answer"] and len(child_llm.requests) == 1
    else:
        assert told == ["the user denied this call"] and child_llm.requests == []


def test_a_second_agent_holding_back_an_approval_in_the_same_step_is_told_to_ask_again_not_lost(stores: Stores) -> None:
    @tool(requires_approval=True)
    def refund(order: int) -> str:
        """Refund an order."""
        return f"order {order} refunded"

    def child(llm: ScriptedLLM) -> AgentLoop:
        return standard_pipeline(llm, RecordingChannel(), stores=stores, tools=[refund], options=OPTIONS).build()

    first_llm = ScriptedLLM([ScriptedLLM.tool_call("refund", {"order": 7}), "Order 7 is refunded."])
    second_llm = ScriptedLLM([ScriptedLLM.tool_call("refund", {"order": 8})])
    both = LlmReply(tool_calls=(
        *ScriptedLLM.tool_call("billing", {"question": "refund order 7"}).tool_calls,
        *ScriptedLLM.tool_call("returns", {"question": "refund order 8"}).tool_calls,
    ))
    parent_llm = ScriptedLLM([both, "Refunded order 7; order 8 next."])
    tools = [agent_tool("billing", "Refunds.", child(first_llm)), agent_tool("returns", "Refunds.", child(second_llm))]
    loop = standard_pipeline(parent_llm, RecordingChannel(), stores=stores, tools=tools, options=OPTIONS).build()
    session = Session("s", user_id="ada")
    asked = loop.run_turn_sync(session, IncomingMessage("refund orders 7 and 8")).require(TurnOutcome).approval
    assert asked is not None and asked.arguments in ({"order": 7}, {"order": 8})
    loop.run_turn_sync(session, IncomingMessage.approval(asked.approval_id, approved=True))
    told = [m.content for m in parent_llm.requests[-1].messages if m.tool_call_id is not None]
    assert len(told) == 2 and sum("another call awaits the user's approval; ask again after it is decided" in t for t in told) == 1
