"""An LLM adapter for the Anthropic Messages API (`POST /v1/messages`), streaming over
httpx: native tool use, token usage, the API's errors in one line. Needs the `anthropic` extra."""

from __future__ import annotations

import asyncio
import enum
import json
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Iterator
from contextlib import aclosing
from typing import Any

import attrs
import httpx

from agentloop.adapters.llm.http import ModelHttpClient, RetryPolicy, given_window, is_event_stream, json_body, sse_events
from agentloop.adapters.llm.http import check_reachable as _check_reachable
from agentloop.errors import LlmCallError
from agentloop.messages import (
    ChatMessage,
    Finished,
    LlmReply,
    LlmRequest,
    Role,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    Usage,
)
from agentloop.outcome import FailureKind
from agentloop.streaming import ReplyBuilder, collect

__all__ = ["ANTHROPIC_API_URL", "ANTHROPIC_VERSION", "AnthropicLLM", "CacheBreakpoint", "PromptCaching", "check_reachable"]

ANTHROPIC_API_URL = "https://api.anthropic.com/v1"
ANTHROPIC_VERSION = "2023-06-01"
"""The `anthropic-version` header sent with every request: the wire format this adapter speaks."""

_RETRYABLE_ERRORS = {"overloaded_error": FailureKind.UNKNOWN, "api_error": FailureKind.UNKNOWN,
                     "rate_limit_error": FailureKind.RATE_LIMIT, "timeout_error": FailureKind.TIMEOUT}
"""The API's error types worth another attempt, and the failure kind each is."""

_EPHEMERAL = {"type": "ephemeral"}


class CacheBreakpoint(enum.Enum):
    """Where a `cache_control` breakpoint may go: the prompt up to it is cached as one prefix."""

    SYSTEM = "system"
    """The system prompt."""
    TOOLS = "tools"
    """The last tool: every tool spec (they come right after the system prompt)."""
    HISTORY = "history"
    """The last message before the current user message: the conversation so far."""
    LAST_MESSAGE = "last_message"
    """The last message sent: this call's whole prompt, read back by the tool loop's next call."""


@attrs.frozen
class PromptCaching:
    """Which `cache_control: {"type": "ephemeral"}` breakpoints the adapter places (the API
    allows four per request). `PromptCaching(())` places none."""

    breakpoints: tuple[CacheBreakpoint, ...] = attrs.field(
        default=(CacheBreakpoint.SYSTEM, CacheBreakpoint.TOOLS, CacheBreakpoint.HISTORY), converter=tuple
    )

    @breakpoints.validator
    def _distinct(self, _: attrs.Attribute[tuple[CacheBreakpoint, ...]], value: tuple[CacheBreakpoint, ...]) -> None:
        if len(set(value)) != len(value):
            raise ValueError(f"each cache breakpoint may be named once, got {[b.value for b in value]}")


def _headers(api_key: str | None) -> dict[str, str]:
    """What every request carries: the wire format's version and, when given, the key."""
    return {"anthropic-version": ANTHROPIC_VERSION, **({"x-api-key": api_key} if api_key else {})}


def check_reachable(
    base_url: str, *, model: str | None = None, api_key: str | None = None, timeout: float = 5.0
) -> int | None:
    """The start-up check of `agentloop.adapters.llm.http.check_reachable`, authenticated as
    the Messages API wants: the API lists its models (GET `/v1/models`) only to a caller with a key.
    The model's `max_input_tokens`, where its entry has it, is the answer."""
    return _check_reachable(base_url, model=model, timeout=timeout, headers=_headers(api_key))


def _blocks(message: ChatMessage) -> list[dict[str, Any]]:
    """`message` as Messages API content blocks (text, tool_use or tool_result)."""
    if message.role is Role.TOOL:
        return [{"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.content or ""}]
    # The API refuses a text block of only whitespace, which a model may write before a tool call.
    text = message.content if message.content and not message.content.isspace() else None
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    return blocks + [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in message.tool_calls]


def _messages(
    messages: Iterable[ChatMessage],
) -> tuple[str | None, list[dict[str, Any]], dict[str, Any] | None]:
    """The top-level system prompt, the user/assistant turns of `messages`, and the last
    block of the history before the current (last) user message, if there is one.

    The API takes system text only at the top and tool results as user content, so tool
    results that follow one another (one model step's calls) and any user text after them
    share one user message: consecutive messages of one API role are merged.
    """
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    last_blocks: list[dict[str, Any] | None] = []
    """per message: its last block (None for a system message or one with no blocks)"""
    current = -1
    for message in messages:
        last_blocks.append(None)
        if message.role is Role.SYSTEM:
            system.extend([message.content] if message.content else [])
            continue
        current = len(last_blocks) - 1 if message.role is Role.USER else current
        role = "assistant" if message.role is Role.ASSISTANT else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        last_blocks[-1] = blocks[-1]
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    history_end = next((block for block in reversed(last_blocks[:max(current, 0)]) if block is not None), None)
    return ("\n\n".join(system) or None), turns, history_end


def _tool(spec: ToolSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description,
            "input_schema": spec.parameters or {"type": "object", "properties": {}}}


def _api_error(body: Any) -> tuple[str, str] | None:
    """(type, message) of the API's `{"type": "error", "error": {...}}` body, if that is what `body` is."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None
    return str(error.get("type") or "error"), " ".join(str(error.get("message") or "").split())


def _stream_error(body: Any) -> LlmCallError:
    """The `error` event a stream ended with, as a failure of the kind its type says."""
    kind_and_message = _api_error(body)
    error_type, message = kind_and_message or ("error", "no explanation given")
    kind = _RETRYABLE_ERRORS.get(error_type, FailureKind.UNKNOWN)
    return LlmCallError(
        f"the Anthropic API stopped the answer midway ({error_type}: {message})",
        kind=kind, retryable=error_type in _RETRYABLE_ERRORS,
    )


class _Events:
    """Turns the Messages API's stream events into agentloop stream events, one at a time."""

    def __init__(self) -> None:
        self.builder = ReplyBuilder()
        self.model: str | None = None
        self.stop_reason: str | None = None
        self.counts = {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 0}
        """the latest count of each usage field the API sent (each is cumulative)"""
        self.tools: dict[int, int] = {}
        """content block index -> tool call index, for tool_use blocks"""
        self.tool_inputs: dict[int, Any] = {}
        """tool_use blocks whose input came whole at their start and no deltas (yet)"""

    def feed(self, data: str) -> Iterator[StreamEvent]:
        """The agentloop events that the API event `data` makes, each added to the reply so far;
        a VALIDATION `LlmCallError` for an event that is not JSON or lacks what its type needs."""
        try:
            for out in self._translate(json.loads(data)):
                self.builder.add(out)
                yield out
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise LlmCallError(
                f"the Anthropic API sent a malformed stream event ({exc!r}): {' '.join(data.split())[:200]}",
                kind=FailureKind.VALIDATION,
            ) from exc

    def _translate(self, event: dict[str, Any]) -> Iterator[StreamEvent]:
        kind = event.get("type")
        if kind == "message_start":
            message = event["message"]
            self.model = message.get("model")
            self._count(message.get("usage"))
        elif kind == "content_block_start":
            yield from self._start(event["index"], event["content_block"])
        elif kind == "content_block_delta":
            yield from self._delta(event["index"], event["delta"])
        elif kind == "content_block_stop":
            index = event["index"]
            if index in self.tool_inputs:
                yield ToolCallDelta(self.tools[index], arguments_fragment=json.dumps(self.tool_inputs.pop(index)))
        elif kind == "message_delta":
            self.stop_reason = event.get("delta", {}).get("stop_reason") or self.stop_reason
            self._count(event.get("usage"))
        elif kind == "message_stop":
            yield self.usage()
            yield Finished(self.builder.reply(model=self.model, stop_reason=self.stop_reason))
        elif kind == "error":
            raise _stream_error(event)

    def _start(self, index: int, block: dict[str, Any]) -> Iterator[StreamEvent]:
        if block["type"] == "text" and block.get("text"):
            yield TextDelta(block["text"])
        elif block["type"] == "tool_use":
            self.tools[index] = len(self.tools)
            if block.get("input"):
                self.tool_inputs[index] = block["input"]
            yield ToolCallDelta(self.tools[index], block["id"], block["name"])

    def _delta(self, index: int, delta: dict[str, Any]) -> Iterator[StreamEvent]:
        if delta["type"] == "text_delta" and delta["text"]:
            yield TextDelta(delta["text"])
        elif delta["type"] == "input_json_delta" and delta["partial_json"]:
            self.tool_inputs.pop(index, None)
            yield ToolCallDelta(self.tools[index], arguments_fragment=delta["partial_json"])

    def _count(self, usage: Any) -> None:
        """Take the counts `usage` has: `message_start` sends the input counts, `message_delta` the
        output count so far (and may repeat the input counts); each is cumulative, so the latest wins."""
        if isinstance(usage, dict):
            for key in self.counts:
                self.counts[key] = int(usage.get(key) or 0) or self.counts[key]

    def usage(self) -> Usage:
        """The message's usage: the API counts the uncached input (`input_tokens`) apart from what it
        wrote to and read from the prompt cache; `Usage.input_tokens` is the whole prompt."""
        written, read = self.counts["cache_creation_input_tokens"], self.counts["cache_read_input_tokens"]
        return Usage(self.counts["input_tokens"] + written + read, self.counts["output_tokens"], read, written)


def _as_events(message: dict[str, Any]) -> Iterator[str]:
    """A whole (not streamed) Messages API reply as the stream events that would have sent it."""
    yield json.dumps({"type": "message_start", "message": {**message, "content": []}})
    for index, block in enumerate(message["content"]):
        yield json.dumps({"type": "content_block_start", "index": index, "content_block": block})
        yield json.dumps({"type": "content_block_stop", "index": index})
    yield json.dumps({"type": "message_delta", "delta": {"stop_reason": message.get("stop_reason")}, "usage": message.get("usage")})
    yield json.dumps({"type": "message_stop"})


class AnthropicLLM:
    """Claude through the Messages API, streamed.

    `base_url` is the API root up to `/v1` (Anthropic's own is `ANTHROPIC_API_URL`); the key goes
    in the `x-api-key` header. The API requires a token limit, so a request without
    `max_tokens` gets this adapter's `max_tokens`. `stop` becomes `stop_sequences`; the
    API has no `seed`, so a request's seed is not sent. `caching` says where the prompt cache's
    breakpoints go (by default on the system prompt, the tools and the history before the
    current message); the usage reports what the API read from and wrote to the cache.
    `context_window` is the model's window when known (given, or read by `check`).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        retry: RetryPolicy = RetryPolicy(),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        client: httpx.AsyncClient | None = None,
        context_window: int | None = None,
        max_tokens: int = 4096,
        caching: PromptCaching = PromptCaching(),
    ) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1 (the API requires a limit), got {max_tokens}")
        self.model = model
        self.context_window = given_window(context_window)
        self.max_tokens = max_tokens
        self.caching = caching
        self._http = ModelHttpClient(base_url, headers=_headers(api_key), timeout=timeout, retry=retry, sleep=sleep, client=client)

    def _payload(self, request: LlmRequest) -> dict[str, Any]:
        """The JSON body `request` is sent as."""
        system, messages, history_end = _messages(request.messages)
        payload: dict[str, Any] = {
            "model": request.model or self.model,
            "max_tokens": request.max_tokens or self.max_tokens,
            "messages": messages,
            "stream": True,
        }
        if system:
            payload["system"] = system
        if request.tools:
            payload["tools"] = [_tool(t) for t in request.tools]
        if request.response_schema is not None:  # no JSON response format: the answer is a call of its own tool
            answer = request.response_schema
            payload["tools"] = [*payload.get("tools", []), _tool(ToolSpec(answer.name, answer.description, answer.schema))]
            payload["tool_choice"] = {"type": "any"} if request.tools else {"type": "tool", "name": answer.name}
        if request.temperature is not None:
            payload["temperature"] = request.temperature
        if request.stop:
            payload["stop_sequences"] = list(request.stop)
        self._place_breakpoints(payload, history_end)
        return payload

    def _place_breakpoints(self, payload: dict[str, Any], history_end: dict[str, Any] | None) -> None:
        """Mark the end of each prefix `caching` names that this request has with `cache_control`."""
        for breakpoint in self.caching.breakpoints:
            if breakpoint is CacheBreakpoint.SYSTEM and payload.get("system"):
                payload["system"] = [{"type": "text", "text": payload["system"], "cache_control": _EPHEMERAL}]
            elif breakpoint is CacheBreakpoint.TOOLS and payload.get("tools"):
                payload["tools"][-1] = {**payload["tools"][-1], "cache_control": _EPHEMERAL}
            elif breakpoint is CacheBreakpoint.HISTORY and history_end is not None:
                history_end["cache_control"] = _EPHEMERAL
            elif breakpoint is CacheBreakpoint.LAST_MESSAGE and payload["messages"]:
                payload["messages"][-1]["content"][-1]["cache_control"] = _EPHEMERAL

    async def complete(self, request: LlmRequest) -> LlmReply:
        async with aclosing(self.stream(request)) as events:
            return await collect(events)

    def check(self, *, timeout: float = 5.0) -> None:
        """The start-up check (`agentloop.adapters.llm.http.check_reachable`) of this model on its server, with its key;
        the context window its listing gives becomes `context_window` unless one was given."""
        listed = self._http.check(self.model, timeout=timeout)
        self.context_window = self.context_window or listed

    async def stream(self, request: LlmRequest) -> AsyncGenerator[StreamEvent, None]:
        """Text and tool-use deltas as the API sends them, the usage, then the whole reply."""
        async with self._http.post("/messages", self._payload(request), time_left=request.time_left) as response:
            events = _Events()
            if not is_event_stream(response):  # a server (a proxy, say) that answers with the whole message
                body = await json_body(response)
                if not isinstance(body, dict) or not isinstance(body.get("content"), list):
                    raise LlmCallError(f"the Anthropic API sent a body that is not a message: {str(body)[:200]}", kind=FailureKind.VALIDATION)
                for data in _as_events(body):
                    for out in events.feed(data):
                        yield out
                return
            async for sse in sse_events(response):
                for out in events.feed(sse.data):
                    yield out
                    if isinstance(out, Finished):
                        return
        raise LlmCallError("the Anthropic API's stream was cut off before message_stop", kind=FailureKind.UNKNOWN, retryable=True)
