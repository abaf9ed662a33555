"""AG-UI (protocol 1.0, the `ag-ui-protocol` package's models): `POST /agui/run` takes a `RunAgentInput` and streams
the run as Server-Sent Events, one AG-UI event each.

The thread is the session: a `threadId` that is one of the caller's session ids continues that session; any other
string (AG-UI clients make their own) names a session of the caller's own, derived from it (`Tokens.named_session_id`),
so the same thread id of another caller is another session. The run's input is the last message, the user's; the
conversation before it is the bot's own history. A pending approval ends the run with the interrupt outcome; the next
run's `resume` entry answers it. The tool steps the bot runs here are streamed as they finish (tool call start, args,
end and result); with the workers' inbox only the answer is.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import attrs
from ag_ui.core import (
    PROTOCOL_VERSION,
    AssistantMessage,
    BaseEvent,
    FunctionCall,
    Interrupt,
    Message,
    MessagesSnapshotEvent,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TextPart,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from agentloop._log import get_logger
from agentloop._names import is_message_id, new_id
from agentloop.components import ToolExecution
from agentloop.context import IncomingMessage, Session
from agentloop.scopes import approval_scope
from agentloop.serve.auth import Caller
from agentloop.serve.errors import ApiError
from agentloop.serve.protocols import Mounted
from agentloop.serve.requests import api, api_error, message_text, read_body
from agentloop.serve.server import Server
from agentloop.serve.turns import start_turn

RUN_PATH = "/agui/run"
"""Where an AG-UI client (`HttpAgent(url=...)`, CopilotKit) posts its runs."""
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["approved"],
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string", "description": "what the model is told with it"}},
}
"""The answer an approval's interrupt asks for, as the `payload` of its resume entry."""
_SESSION_ID = re.compile(r"[0-9a-f]{24}\.[0-9a-f]{32}")
_log = get_logger("agentloop.serve")


def mount(server: Server) -> Mounted:
    """The AG-UI run endpoint, and the watch that streams the tool steps of the runs it serves."""
    watched: set[str] = set()

    async def run(server: Server, request: Request, caller: Caller) -> Response:
        return await _run(server, request, caller, watched)

    return Mounted([Route(RUN_PATH, api(server, run), methods=["POST"])], OPENAPI, lambda: _tool_steps(server, watched))


async def _run(server: Server, request: Request, caller: Caller, watched: set[str]) -> Response:
    """Check the input, start the turn (refusals are HTTP errors, before any event) and stream its events."""
    body = await read_body(server, request)
    try:
        given = RunAgentInput.model_validate(body)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()[:3])
        raise ApiError(422, "invalid", f"the body is not an AG-UI RunAgentInput ({problems})") from error
    session = thread_session(server, caller, given.thread_id)
    incoming, message_id, client_id = await _incoming(server, session, given)
    started = await start_turn(server, session, incoming, message_id, given=client_id)
    watched.add(session.id)
    writer = _Writer(given, session.id)
    encoder = EventEncoder(accept=request.headers.get("accept", ""))

    async def events() -> AsyncIterator[str]:
        try:
            for event in writer.started():
                yield encoder.encode(event)
            async for name, data in started.events:
                if name == "outcome":
                    watched.discard(session.id)
                for event in writer.on(name, data):
                    yield encoder.encode(event)
        except Exception as error:
            shown = api_error(error)
            yield encoder.encode(RunErrorEvent(message=shown.message, code=shown.code))
        finally:
            watched.discard(session.id)

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events(), media_type=encoder.get_content_type(), headers=headers)


def thread_session(server: Server, caller: Caller, thread_id: str) -> Session:
    """The caller's session a thread id names: a session id of theirs, or their own session derived from any other
    name; a session id that is not theirs (another tenant's, or unknown) is 404."""
    if server.tokens.owns(caller, thread_id):
        return caller.session(thread_id)
    if _SESSION_ID.fullmatch(thread_id):
        raise ApiError(404, "not_found", f"there is no session {thread_id!r} for this token; send a new threadId to start one")
    if not thread_id.strip():
        raise ApiError(422, "invalid", "threadId is empty; name the conversation (any string) or give a session id")
    return caller.session(server.tokens.named_session_id(caller, f"agui\x1f{thread_id}"))


async def _incoming(server: Server, session: Session, given: RunAgentInput) -> tuple[IncomingMessage, str, bool]:
    """The turn's message, its id and whether the client named it: the decision of a `resume` entry, else the last
    message (the user's; its id, when usable, makes a repeated run answer once)."""
    if given.resume:
        return await _decision(server, session, given.resume), new_id(), False
    last = given.messages[-1] if given.messages else None
    if not isinstance(last, UserMessage):
        raise ApiError(422, "invalid", "the last message of the run must be the user's (role user); the bot answers it")
    if isinstance(last.content, str):
        text = last.content
    elif all(isinstance(part, TextPart) for part in last.content):
        text = "\n".join(part.text for part in last.content if isinstance(part, TextPart))
    else:
        raise ApiError(422, "invalid", "the user's message may hold text parts only; send the text")
    usable = is_message_id(last.id)
    return IncomingMessage(message_text(server, text)), last.id if usable else new_id(), usable


async def _decision(server: Server, session: Session, entries: list[ResumeEntry]) -> IncomingMessage:
    """The user's decision a resume entry carries, on the approval (interrupt) still pending in the session."""
    if len(entries) != 1:
        raise ApiError(422, "invalid", f"the run resumes {len(entries)} interrupts; answer the one pending approval per run")
    entry = entries[0]
    pending = await server.running.stores.approvals.pending(approval_scope(session), session.id)
    if all(waiting.request.approval_id != entry.interrupt_id for waiting in pending):
        raise ApiError(
            404, "not_found", f"no tool call awaits approval {entry.interrupt_id!r} in this thread; it may have been decided already"
        )
    if entry.status == "cancelled":
        return IncomingMessage.approval(entry.interrupt_id, approved=False, note="the user cancelled this call")
    payload = entry.payload
    if not isinstance(payload, dict) or not isinstance(payload.get("approved"), bool):
        raise ApiError(422, "invalid", 'the resume entry\'s payload must be {"approved": true or false, "note": optional text}')
    note = payload.get("note")
    if note is not None and not isinstance(note, str):
        raise ApiError(422, "invalid", "the resume entry's note must be text")
    return IncomingMessage.approval(entry.interrupt_id, approved=payload["approved"], note=note)


@attrs.define
class _Writer:
    """The AG-UI events of one run, from the turn's channel events and its outcome.

    Text streams into a message until a tool step or a withdrawal ends it; a tool step is its call's start, args, end
    and result. A message the turn withdrew (a model that failed mid-answer, a fallback) is ended where it stands, the
    answer follows in a new one, and a messages snapshot before the run's end restates the thread without it."""

    given: RunAgentInput
    session_id: str
    open: str | None = None
    said: str = ""
    last: str | None = None
    """The message shown since the last tool step, once ended."""
    last_text: str | None = None
    withdrawn: bool = False
    standing: list[Message] = attrs.Factory(list)

    def started(self) -> Iterator[BaseEvent]:
        yield RunStartedEvent(
            thread_id=self.given.thread_id, run_id=self.given.run_id, protocol_version=PROTOCOL_VERSION,
            metadata={"agentloop": {"sessionId": self.session_id}},
        )

    def on(self, name: str, data: dict[str, Any]) -> Iterator[BaseEvent]:
        if name == "delta":
            yield from self._say(data["text"])
        elif name == "reset":
            yield from self._withdraw()
        elif name == "text":
            yield from self._final(data["text"])
        elif name == "tool":
            yield from self._tool(data)
        elif name == "outcome":
            yield from self._finish(data)

    def _say(self, text: str) -> Iterator[BaseEvent]:
        if not text:
            return
        if self.open is None:
            self.open, self.said = new_id(), ""
            yield TextMessageStartEvent(message_id=self.open, role="assistant")
        self.said += text
        yield TextMessageContentEvent(message_id=self.open, delta=text)

    def _end(self) -> Iterator[BaseEvent]:
        if self.open is not None:
            yield TextMessageEndEvent(message_id=self.open)
            self.standing.append(AssistantMessage(id=self.open, content=self.said))
            self.last, self.last_text, self.open = self.open, self.said, None

    def _withdraw(self) -> Iterator[BaseEvent]:
        """End what was shown and leave it out of the thread (the snapshot at the end says so)."""
        yield from self._end()
        if self.last is not None:
            self.standing = [message for message in self.standing if message.id != self.last]
            self.withdrawn, self.last, self.last_text = True, None, None

    def _final(self, text: str) -> Iterator[BaseEvent]:
        """A whole message: the canonical text of the one streaming (its missing end streamed, or it replaced), or a new one."""
        if self.open is not None and not text.startswith(self.said):
            yield from self._withdraw()
        if self.open is None and self.last is not None and self.last_text != text:
            yield from self._withdraw()
        if self.open is None and self.last is not None:
            return  # already shown as it is
        yield from self._say(text[len(self.said):] if self.open is not None else text)
        yield from self._end()

    def _tool(self, step: dict[str, Any]) -> Iterator[BaseEvent]:
        yield from self._end()
        self.last = self.last_text = None
        yield from self._call(step["id"], step["name"], step["arguments"])
        content = step["result"] if step["error"] is None else f"error: {step['error']}"
        result_id = new_id()
        yield ToolCallResultEvent(message_id=result_id, tool_call_id=step["id"], content=content, role="tool")
        self.standing.append(ToolMessage(id=result_id, tool_call_id=step["id"], content=content, error=step["error"]))

    def _call(self, call_id: str, name: str, arguments: dict[str, Any]) -> Iterator[BaseEvent]:
        """A tool call's start, its arguments as JSON and its end, in an assistant message of its own."""
        parent, written = new_id(), json.dumps(arguments, ensure_ascii=False)
        yield ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name, parent_message_id=parent)
        yield ToolCallArgsEvent(tool_call_id=call_id, delta=written)
        yield ToolCallEndEvent(tool_call_id=call_id)
        call = ToolCall(id=call_id, type="function", function=FunctionCall(name=name, arguments=written))
        self.standing.append(AssistantMessage(id=parent, tool_calls=[call]))

    def _finish(self, outcome: dict[str, Any]) -> Iterator[BaseEvent]:
        """The answer if it was not streamed as it stands, the pending approval's call, and the run's end."""
        yield from self._end()
        if outcome["text"] is not None and outcome["text"] != self.last_text:
            yield from self._final(outcome["text"])
        approval = outcome["approval"]
        if approval is not None:
            yield from self._call(approval["approval_id"], approval["tool"], approval["arguments"])
        if self.withdrawn:
            yield MessagesSnapshotEvent(messages=[*self.given.messages, *self.standing])
        yield _ending(self.given, outcome)


def _ending(given: RunAgentInput, outcome: dict[str, Any]) -> BaseEvent:
    """RUN_FINISHED (success, interrupt for a pending approval, cancelled for a turn a newer message stopped), or
    RUN_ERROR for a turn that failed or ran out of time."""
    reason = outcome["finish_reason"]
    if reason in ("error", "deadline"):
        said = "; ".join(outcome["failures"]) or "the bot could not answer this message"
        return RunErrorEvent(message=said, code=reason)
    result = {"turnId": outcome["turn_id"], "finishReason": reason, "failures": outcome["failures"]}
    approval = outcome["approval"]
    if approval is not None:
        interrupt = Interrupt(
            id=approval["approval_id"], reason="tool_approval", tool_call_id=approval["approval_id"],
            message=f"The bot wants to run {approval['tool']} with {json.dumps(approval['arguments'], ensure_ascii=False)}. Approve?",
            response_schema=APPROVAL_SCHEMA,
        )
        ending: Any = RunFinishedInterruptOutcome(interrupts=[interrupt])
    elif reason == "interrupted":
        ending = RunFinishedCancelledOutcome()
    else:
        ending = RunFinishedSuccessOutcome()
    return RunFinishedEvent(thread_id=given.thread_id, run_id=given.run_id, result=result, outcome=ending)


def _tool_steps(server: Server, watched: set[str]) -> AbstractAsyncContextManager[None]:
    """While the app runs, each tool the bot's loop runs for a watched session (an AG-UI run streaming) is sent to
    that run as a ("tool", step) channel event; other sessions' streams are left as they are."""

    @asynccontextmanager
    async def hooked() -> AsyncIterator[None]:
        loop = server.running.loop
        settled: list[Any] = [system for system in (loop.systems if loop is not None else ()) if _has_tool_hook(system)]
        before = [system.settings for system in settled]
        for system in settled:
            system.settings = attrs.evolve(system.settings, on_tool_execution=_chained(system.settings.on_tool_execution, server, watched))
        try:
            yield
        finally:
            for system, settings in zip(settled, before):
                system.settings = settings

    return hooked()


def _has_tool_hook(system: object) -> bool:
    """True for a system that runs tools and calls its settings' `on_tool_execution` hook (the tool loop)."""
    settings = getattr(system, "settings", None)
    return attrs.has(type(settings)) and hasattr(settings, "on_tool_execution")


def _chained(
    existing: Callable[[ToolExecution], None] | None, server: Server, watched: set[str]
) -> Callable[[ToolExecution], None]:
    def hook(execution: ToolExecution) -> None:
        if existing is not None:
            existing(execution)
        if execution.session_id in watched:
            step = {"id": execution.id, "name": execution.tool_name, "arguments": execution.arguments,
                    "result": execution.result, "error": execution.error}
            server.channel.publish(execution.session_id, ("tool", step))

    return hook


_ERRORS = {
    status: {"description": meaning, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    for status, meaning in {
        "401": "no valid bearer token (code unauthorized)",
        "404": "the threadId is a session id that is not this token's, or a resume entry names no pending approval (code not_found)",
        "409": "a turn of this thread is running and the server rejects another (code turn_in_progress)",
        "413": "the body is larger than the server's limit (code too_large)",
        "422": "not a RunAgentInput, no user message last, a message too long, or a bad resume payload (code invalid)",
        "429": "this token's rate limit; the Retry-After header says how many seconds to wait (code rate_limited)",
        "503": "the bot's database cannot be reached (or the server is starting); Retry-After says when to retry (code unavailable)",
    }.items()
}
OPENAPI: dict[str, Any] = {
    "paths": {
        RUN_PATH: {
            "post": {
                "summary": "Run the bot as an AG-UI agent (protocol 1.0)",
                "description": "The body is an AG-UI RunAgentInput; threadId is the session (a session id of this token's, or "
                "any other name for a conversation of this token's own). The answer is an AG-UI event stream: RUN_STARTED, "
                "TEXT_MESSAGE_*, TOOL_CALL_* for each tool run, and RUN_FINISHED (outcome interrupt for a pending approval, "
                'resumed by a run whose resume entry has payload {"approved": bool}) or RUN_ERROR.',
                "security": [{"bearer": []}],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object", "required": ["threadId", "runId", "messages"]}}}},
                "responses": {"200": {"description": "the run's AG-UI events, one JSON object per SSE data line",
                                      "content": {"text/event-stream": {"schema": {"type": "string"}}}}, **_ERRORS},
            }
        }
    }
}
"""The run endpoint's part of /openapi.json."""
