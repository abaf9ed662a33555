"""Streams of model events: one way to turn a reply into a stream and a stream into a reply.

An adapter parses its provider's wire format into `StreamEvent`s once; `collect` then
gives the whole `LlmReply` (so `complete` is the collected stream), and `events_of`
streams any `LLM`, using `stream` where the model has it and a one-event-per-part
stream of `complete`'s reply where it does not.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Iterator

from agentloop.errors import LlmCallError
from agentloop.messages import (
    Finished,
    LlmReply,
    LlmRequest,
    ModelSwitched,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from agentloop.outcome import FailureKind
from agentloop.ports.llm import LLM


def reply_events(reply: LlmReply, chunk: int | None = None) -> Iterator[StreamEvent]:
    """The stream a model that cannot stream would have sent: its text, each tool call, its usage, the end.

    With `chunk`, the text and each call's arguments come in pieces of that many characters,
    as a streaming server sends them (the call's id and name with its first piece).
    """
    if chunk is not None and chunk < 1:
        raise ValueError(f"chunk must be a positive number of characters, got {chunk}")
    for piece in _pieces(reply.content or "", chunk):
        yield TextDelta(piece)
    for index, call in enumerate(reply.tool_calls):
        arguments = call.arguments_text if call.arguments_text is not None else json.dumps(call.arguments)
        for number, fragment in enumerate(_pieces(arguments, chunk) if arguments else [""]):
            first = number == 0
            yield ToolCallDelta(index, call.id if first else None, call.name if first else None, fragment)
    if reply.usage is not None:
        yield reply.usage
    yield Finished(reply)


def _pieces(text: str, chunk: int | None) -> Iterator[str]:
    size = chunk or len(text) or 1
    for start in range(0, len(text), size):
        yield text[start : start + size]


async def events_of(llm: LLM, request: LlmRequest) -> AsyncGenerator[StreamEvent, None]:
    """`llm`'s answer to `request` as a stream, whether or not the model streams (has `StreamingLLM.stream`)."""
    stream = getattr(llm, "stream", None)  # what isinstance(llm, StreamingLLM) checks, at a tenth of its cost per call
    if callable(stream):  # a model may keep a setting named `stream` (stream=False): it is no method to call
        async for event in stream(request):
            yield event
        return
    for event in reply_events(await llm.complete(request)):
        yield event


async def collect(
    events: AsyncIterable[StreamEvent],
    on_text: Callable[[str], Awaitable[None]] | None = None,
    on_switch: Callable[[ModelSwitched], Awaitable[None]] | None = None,
) -> LlmReply:
    """The reply a stream ends with (its `Finished`); `LlmCallError` if it ends without one.

    `on_text` is awaited with each text delta as it arrives (to show the answer while it is written),
    `on_switch` with each fallback to another model (whose `withdrawn` voids the text so far).
    An `LlmCallError` that breaks the stream leaves with the text streamed so far as its `partial_text`.
    """
    streamed: list[str] = []
    try:
        async for event in events:
            if isinstance(event, Finished):
                return event.reply
            if isinstance(event, TextDelta):
                streamed.append(event.text)
                if on_text is not None:
                    await on_text(event.text)
            elif isinstance(event, ModelSwitched):
                if event.withdrawn:
                    streamed.clear()
                if on_switch is not None:
                    await on_switch(event)
    except LlmCallError as exc:
        exc.partial_text = "".join(streamed)
        raise
    raise LlmCallError(
        "the model's stream ended before it finished", kind=FailureKind.UNKNOWN, retryable=True, partial_text="".join(streamed)
    )


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
