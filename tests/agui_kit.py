"""What the AG-UI tests share: the bots `agentloop serve --pipeline` loads for them, and a client that reads a run's
stream and validates every event with the `ag-ui-protocol` models (unknown fields refused, the order checked)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx
from ag_ui.core import BaseEvent, Event, EventType, RunAgentInput, UserMessage
from pydantic import TypeAdapter

from agentloop import LlmReply, LlmRequest, Role, tool
from agentloop.adapters import FallbackLLM
from agentloop.ports import Channel, Stores
from agentloop.testing import ScriptedLLM
from serve_kit import delete_file
from systems import StandardPipeline, standard_pipeline

EVENT: TypeAdapter[Any] = TypeAdapter(Event)
"""Any AG-UI event, told apart by its type."""
TERMINAL = (EventType.RUN_FINISHED, EventType.RUN_ERROR)
_runs = itertools.count(1)


@tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny in {city}"


def _answer(request: LlmRequest) -> LlmReply | str:
    """Calls weather for "weather in CITY", delete_file for "delete PATH", else says which user turn this is."""
    last = request.messages[-1]
    if last.role is Role.TOOL:
        return f"The tool said: {last.content}."
    text = last.content or ""
    if text.startswith("weather in "):
        return ScriptedLLM.tool_call("weather", {"city": text.removeprefix("weather in ")})
    if text.startswith("delete "):
        return ScriptedLLM.tool_call("delete_file", {"path": text.removeprefix("delete ")})
    turns = sum(message.role is Role.USER for message in request.messages)
    return f"You said {text!r}; this is turn {turns} of this thread."


def tool_bot(channel: Channel, stores: Stores) -> StandardPipeline:
    """The standard bot with a tool it runs at once and one that waits for approval; its model streams in pieces."""
    return standard_pipeline(ScriptedLLM(_answer, chunk=5), channel, stores=stores, tools=[weather, delete_file])


def falling_back_bot(channel: Channel, stores: Stores) -> StandardPipeline:
    """A bot whose first model breaks off mid-answer, every time: the second one answers instead."""
    broken = ScriptedLLM(lambda request: ScriptedLLM.cut("I was saying something wr", after=3), chunk=5)
    return standard_pipeline(FallbackLLM([broken, ScriptedLLM(["The second model's answer."], chunk=5)]), channel, stores=stores)


def run_input(thread_id: str, text: str | None = None, **fields: Any) -> dict[str, Any]:
    """A RunAgentInput (built with the official model) as the JSON an AG-UI client posts."""
    number = next(_runs)
    messages = [] if text is None else [UserMessage(id=f"user-{number}", content=text)]
    built = RunAgentInput(thread_id=thread_id, run_id=f"run-{number}", messages=messages, tools=[], context=[], state={},
                          forwarded_props={}, **fields)
    dumped: dict[str, Any] = json.loads(built.model_dump_json(by_alias=True))
    return dumped


def run(url: str, token: str | None, body: dict[str, Any]) -> tuple[httpx.Response, list[BaseEvent]]:
    """POST `body` to the run endpoint; the response and, when it streamed, each event validated and in order."""
    headers = {"Accept": "text/event-stream", **({"Authorization": f"Bearer {token}"} if token else {})}
    with httpx.stream("POST", f"{url}/agui/run", json=body, headers=headers, timeout=30) as response:
        if response.status_code != 200:
            response.read()
            return response, []
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [_event(line.removeprefix("data: ")) for line in response.iter_lines() if line.startswith("data: ")]
    check_order(events)
    return response, events


def events_of(stream: str) -> list[BaseEvent]:
    """Each event of a whole run's SSE body, validated and checked in order."""
    events = [_event(line.removeprefix("data: ")) for line in stream.splitlines() if line.startswith("data: ")]
    check_order(events)
    return events


def _event(data: str) -> BaseEvent:
    event: BaseEvent = EVENT.validate_json(data)
    assert not event.model_extra, f"fields AG-UI does not define: {event.model_extra}"
    return event


def check_order(events: list[BaseEvent]) -> None:
    """The run's framing: RUN_STARTED first, one terminal event last; a message or tool call opened before its
    content, closed once, and none left open at the end."""
    assert events and events[0].type is EventType.RUN_STARTED, events[:1]
    assert events[-1].type in TERMINAL and not any(event.type in TERMINAL for event in events[:-1]), [e.type for e in events]
    messages: set[str] = set()
    calls: set[str] = set()
    for event in events:
        kind = event.type
        key = getattr(event, "message_id", None)
        call = getattr(event, "tool_call_id", None)
        if kind is EventType.TEXT_MESSAGE_START:
            assert key not in messages, f"message {key} opened twice"
            messages.add(key)
        elif kind in (EventType.TEXT_MESSAGE_CONTENT, EventType.TEXT_MESSAGE_END):
            assert key in messages, f"{kind} for message {key}, which is not open"
            if kind is EventType.TEXT_MESSAGE_END:
                messages.discard(key)
        elif kind is EventType.TOOL_CALL_START:
            calls.add(call)
        elif kind in (EventType.TOOL_CALL_ARGS, EventType.TOOL_CALL_END):
            assert call in calls, f"{kind} for call {call}, which is not open"
            if kind is EventType.TOOL_CALL_END:
                calls.discard(call)
    assert not messages and not calls, f"left open: messages {messages}, tool calls {calls}"


def kinds(events: list[BaseEvent]) -> list[str]:
    return [event.type.value for event in events]


def said(events: list[BaseEvent]) -> list[str]:
    """The text of each message the run streamed, in order."""
    texts: dict[str, str] = {}
    for event in events:
        if event.type is EventType.TEXT_MESSAGE_START:
            texts[event.message_id] = ""  # type: ignore[attr-defined]
        elif event.type is EventType.TEXT_MESSAGE_CONTENT:
            texts[event.message_id] += event.delta  # type: ignore[attr-defined]
    return list(texts.values())
