"""Steps for serving.feature's AG-UI scenario: runs posted to /agui/run, every event validated (tests/agui_kit.py)."""

from __future__ import annotations

from typing import Any

from ag_ui.core import EventType, ResumeEntry
from pytest_bdd import parsers, then, when

from agui_kit import events_of, run_input, said
from serve_kit import ALICE, BOB, auth

TOKENS = {"alice": ALICE, "bob": BOB}


def _run(bot: Any, user: str, body: dict[str, Any]) -> None:
    bot.answer = bot.client().post("/agui/run", json=body, headers={"Accept": "text/event-stream", **auth(TOKENS[user])})
    bot.stream = events_of(bot.answer.text) if bot.answer.status_code == 200 else []


@when(parsers.parse('{user} runs "{text}" over AG-UI in the thread "{thread}"'))
def _agui_run(bot: Any, user: str, text: str, thread: str) -> None:
    _run(bot, user, run_input(thread, text))


@then(parsers.parse("the AG-UI run ends with an interrupt for {tool}"))
def _agui_interrupt(bot: Any, tool: str) -> None:
    finished = bot.stream[-1]
    assert finished.type is EventType.RUN_FINISHED and finished.outcome.type == "interrupt"
    calls = {event.tool_call_id: event.tool_call_name for event in bot.stream if event.type is EventType.TOOL_CALL_START}
    bot.approval = finished.outcome.interrupts[0].id
    assert calls[finished.outcome.interrupts[0].tool_call_id] == tool


@when(parsers.parse('{user} resumes the thread "{thread}" over AG-UI approving the call'))
def _agui_resume(bot: Any, user: str, thread: str) -> None:
    resume = [ResumeEntry(interrupt_id=bot.approval, status="resolved", payload={"approved": True})]
    _run(bot, user, run_input(thread, resume=resume))


@then(parsers.parse('the AG-UI run shows the tool\'s result "{result}" and then says "{text}"'))
def _agui_result(bot: Any, result: str, text: str) -> None:
    results = [event.content for event in bot.stream if event.type is EventType.TOOL_CALL_RESULT]
    assert results == [result] and said(bot.stream)[-1] == text
    assert bot.stream[-1].type is EventType.RUN_FINISHED and bot.stream[-1].outcome.type == "success"


@when(parsers.parse("{user} runs \"{text}\" over AG-UI in alice's session"))
def _agui_intrude(bot: Any, user: str, text: str) -> None:
    session = bot.stream[0].metadata["agentloop"]["sessionId"] if bot.stream else None
    assert session is not None
    _run(bot, user, run_input(session, text))
