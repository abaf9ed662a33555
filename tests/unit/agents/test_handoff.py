"""Handoffs: one conversation among several bots, one holder at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from agentloop import AgentLoop, ChatMessage, IncomingMessage, PipelineError, Session, ToolExecutions, TurnOutcome, history_scope
from agentloop.adapters import Stores, open_stores
from agentloop.agents import HandoffError, Handoffs, handoff_line
from agentloop.testing import PromptWriter, RecordingChannel, ScriptedLLM
from systems import StandardOptions, ToolLoopSystem, standard_pipeline
from systems.input import InputSanitizationSystem

SESSION = Session("desk", user_id="ada")


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Stores]:
    opened = open_stores(tmp_path)
    yield opened
    opened.close()


def test_a_transfer_tool_run_outside_a_desk_turn_fails_saying_why(stores: Stores) -> None:
    desk = Handoffs(["triage", "billing"], first="triage", sessions=stores.sessions)
    transfer = desk.transfer_tool("billing")
    with pytest.raises(HandoffError, match="outside Handoffs.run_turn"):
        asyncio.run(transfer.invoke({"reason": "billing"}))


def test_a_desk_refuses_unknown_bots_when_it_is_wired(stores: Stores) -> None:
    with pytest.raises(PipelineError, match="the first bot 'sales' is not one of the bots"):
        Handoffs(["triage"], first="sales", sessions=stores.sessions)
    desk = Handoffs(["triage"], first="triage", sessions=stores.sessions)
    with pytest.raises(PipelineError, match="cannot transfer to 'billing'"):
        desk.transfer_tool("billing")
    with pytest.raises(PipelineError, match="'triage' holds session 'desk' but was never added"):
        desk.run_turn_sync(SESSION, IncomingMessage("hi"))


def test_a_transfer_to_the_bot_holding_the_session_changes_nothing(stores: Stores) -> None:
    desk = Handoffs(["triage", "billing"], first="triage", sessions=stores.sessions)
    llm = ScriptedLLM([ScriptedLLM.tool_call("hand_back", {"reason": "x"}), "still here"])
    desk.add("triage", AgentLoop([InputSanitizationSystem(), PromptWriter(), ToolLoopSystem(llm, [desk.hand_back_tool()])]))
    ctx = desk.run_turn_sync(SESSION, IncomingMessage("hi"))
    (ran,) = ctx.require(ToolExecutions).executions
    assert ran.result == "the conversation is already with triage; answer the user yourself"
    assert asyncio.run(desk.holder(SESSION)) == "triage"
    assert asyncio.run(stores.sessions.recent(history_scope(SESSION), 10)) == ()


def test_the_history_filter_decides_what_the_holding_bot_is_shown(stores: Stores) -> None:
    asyncio.run(stores.sessions.append(history_scope(SESSION), [
        ChatMessage.user("my card number is 4111"), ChatMessage.assistant("Noted."),
        ChatMessage.user("I want a refund"), ChatMessage.assistant(handoff_line("triage", "billing", "a refund")),
    ]))
    shown: list[tuple[str, int]] = []

    def without_card_numbers(name: str, history: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
        shown.append((name, len(history)))
        return [m for m in history if "card number" not in (m.content or "")]

    desk = Handoffs(["triage", "billing"], first="triage", sessions=stores.sessions, history_filter=without_card_numbers)
    llm = ScriptedLLM(["Refunds take 3 days."])
    options = StandardOptions(compaction=False)
    desk.add("billing", standard_pipeline(llm, RecordingChannel(), stores=stores, options=options).build())
    desk.run_turn_sync(SESSION, IncomingMessage("when is my refund?"))
    prompt = "\n".join(m.content or "" for m in llm.requests[0].messages)
    assert shown == [("billing", 4)]
    assert "I want a refund\n[handoff from triage to billing] a refund" in prompt and "4111" not in prompt


def test_a_transfer_recorded_by_another_process_passes_the_session_to_its_target(stores: Stores) -> None:
    options = StandardOptions(compaction=False)

    def desk(triage: ScriptedLLM, billing: ScriptedLLM) -> Handoffs:
        made = Handoffs(["triage", "billing"], first="triage", sessions=stores.sessions)
        made.add("triage", standard_pipeline(triage, RecordingChannel(), stores=stores, tools=[made.transfer_tool("billing")],
                                             options=options).build())
        made.add("billing", standard_pipeline(billing, RecordingChannel(), stores=stores, options=options).build())
        return made

    here_triage, here_billing = ScriptedLLM(["Hello."]), ScriptedLLM(["Refunds take 3 days."])
    here = desk(here_triage, here_billing)
    there = desk(ScriptedLLM([ScriptedLLM.tool_call("transfer_to_billing", {"reason": "a refund"}), "Billing takes it."]),
                 ScriptedLLM([]))
    here.run_turn_sync(SESSION, IncomingMessage("hi"))
    there.run_turn_sync(SESSION, IncomingMessage("I want a refund"))
    answered = here.run_turn_sync(SESSION, IncomingMessage("when is my refund?"))
    assert answered.require(TurnOutcome).assistant_text == "Refunds take 3 days." and len(here_triage.requests) == 1
