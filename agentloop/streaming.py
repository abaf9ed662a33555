"""Streams of model events: one way to turn a reply into a stream and a stream into a reply.

An adapter parses its provider's wire format into `StreamEvent`s once; `collect` then
gives the whole `LlmReply` (so `complete` is the collected stream), and `events_of`
streams any `LLM`, using `stream` where the model has it and a one-event-per-part
stream of `complete`'s reply where it does not.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Iterator

from agentloop.errors import LlmCallError
from agentloop.messages import (
    Finished,
    LlmReply,
    LlmRequest,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from agentloop.outcome import FailureKind
from agentloop.ports.llm import LLM, StreamingLLM


def reply_events(reply: LlmReply) -> Iterator[StreamEvent]:
    """The stream a model that cannot stream would have sent: its text, each tool call, its usage, the end."""
    if reply.content:
        yield TextDelta(reply.content)
    for index, call in enumerate(reply.tool_calls):
        yield ToolCallDelta(index, call.id, call.name, call.arguments_text if call.arguments_text is not None else json.dumps(call.arguments))
    if reply.usage is not None:
        yield reply.usage
    yield Finished(reply)


async def events_of(llm: LLM, request: LlmRequest) -> AsyncIterator[StreamEvent]:
    """`llm`'s answer to `request` as a stream, whether or not the model streams."""
    if isinstance(llm, StreamingLLM):
        async for event in llm.stream(request):
            yield event
        return
    for event in reply_events(await llm.complete(request)):
        yield event


async def collect(events: AsyncIterable[StreamEvent]) -> LlmReply:
    """The reply a stream ends with (its `Finished`); `LlmCallError` if it ends without one."""
    async for event in events:
        if isinstance(event, Finished):
            return event.reply
    raise LlmCallError("the model's stream ended before it finished", kind=FailureKind.UNKNOWN, retryable=True)


class ReplyBuilder:
    """Adds up deltas into a reply, for an adapter whose wire format has no final message."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, list[str]] = {}
        self.ids: dict[int, str] = {}
        self.names: dict[int, str] = {}
        self.usage: Usage | None = None

    def add(self, event: StreamEvent) -> None:
        if isinstance(event, TextDelta):
            self.text.append(event.text)
        elif isinstance(event, ToolCallDelta):
            self.calls.setdefault(event.index, []).append(event.arguments_fragment)
            if event.id:
                self.ids[event.index] = event.id
            if event.name:
                self.names[event.index] = event.name
        elif isinstance(event, Usage):
            self.usage = event

    def reply(self, *, model: str | None = None, stop_reason: str | None = None) -> LlmReply:
        """The reply so far; a call whose arguments are not a JSON object carries `arguments_error`."""
        calls = tuple(
            tool_call(self.ids.get(index, f"call_{index}"), self.names.get(index, ""), "".join(self.calls[index]))
            for index in sorted(self.calls)
        )
        return LlmReply("".join(self.text) or None, calls, model, self.usage, stop_reason)


def tool_call(call_id: str, name: str, arguments: str) -> ToolCall:
    """A call with its JSON `arguments` text read; text that is not a JSON object becomes
    `arguments_error` (kept as `arguments_text`), so the tool loop tells the model instead
    of failing the turn. No text at all is no arguments."""
    if not arguments:
        return ToolCall(call_id, name)
    try:
        read = json.loads(arguments)
    except json.JSONDecodeError as exc:
        return ToolCall(call_id, name, arguments_error=f"they are not valid JSON ({exc})", arguments_text=arguments)
    if not isinstance(read, dict):
        return ToolCall(call_id, name, arguments_error="they are not a JSON object", arguments_text=arguments)
    return ToolCall(call_id, name, read)
