"""An LLM adapter for the Anthropic Messages API (`POST /v1/messages`), streaming over
httpx: native tool use, token usage, the API's errors in one line. Needs the `anthropic` extra."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Iterator
from contextlib import aclosing
from typing import Any

import httpx

from agentloop.adapters.llm.http import ModelHttpClient, RetryPolicy, sse_events
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

__all__ = ["ANTHROPIC_API_URL", "ANTHROPIC_VERSION", "AnthropicLLM", "check_reachable"]

ANTHROPIC_API_URL = "https://api.anthropic.com/v1"
ANTHROPIC_VERSION = "2023-06-01"
"""The `anthropic-version` header sent with every request: the wire format this adapter speaks."""

_RETRYABLE_ERRORS = {"overloaded_error": FailureKind.UNKNOWN, "api_error": FailureKind.UNKNOWN,
                     "rate_limit_error": FailureKind.RATE_LIMIT, "timeout_error": FailureKind.TIMEOUT}
"""The API's error types worth another attempt, and the failure kind each is."""


def _headers(api_key: str | None) -> dict[str, str]:
    """What every request carries: the wire format's version and, when given, the key."""
    return {"anthropic-version": ANTHROPIC_VERSION, **({"x-api-key": api_key} if api_key else {})}


def check_reachable(base_url: str, *, model: str | None = None, api_key: str | None = None, timeout: float = 5.0) -> None:
    """The start-up check of `agentloop.adapters.llm.http.check_reachable`, authenticated as
    the Messages API wants: the API lists its models (GET `/v1/models`) only to a caller with a key."""
    _check_reachable(base_url, model=model, timeout=timeout, headers=_headers(api_key))


def _blocks(message: ChatMessage) -> list[dict[str, Any]]:
    """`message` as Messages API content blocks (text, tool_use or tool_result)."""
    if message.role is Role.TOOL:
        return [{"type": "tool_result", "tool_use_id": message.tool_call_id, "content": message.content or ""}]
    # The API refuses a text block of only whitespace, which a model may write before a tool call.
    text = message.content if message.content and not message.content.isspace() else None
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    return blocks + [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in message.tool_calls]


def _messages(messages: Iterable[ChatMessage]) -> tuple[str | None, list[dict[str, Any]]]:
    """The top-level system prompt and the user/assistant turns of `messages`.

    The API takes system text only at the top and tool results as user content, so tool
    results that follow one another (one model step's calls) and any user text after them
    share one user message: consecutive messages of one API role are merged.
    """
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role is Role.SYSTEM:
            system.extend([message.content] if message.content else [])
            continue
        role = "assistant" if message.role is Role.ASSISTANT else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return ("\n\n".join(system) or None), turns


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
        self.input_tokens = 0
        self.output_tokens = 0
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
            yield Usage(self.input_tokens, self.output_tokens)
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
        """Take the counts `usage` has: input tokens come at the start (those written to and read from
        the prompt cache, which the API counts apart, included), output tokens grow to the end."""
        if isinstance(usage, dict):
            read = sum(usage.get(key) or 0 for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
            self.input_tokens = read or self.input_tokens
            self.output_tokens = usage.get("output_tokens") or self.output_tokens


class AnthropicLLM:
    """Claude through the Messages API, streamed.

    `base_url` is the API root up to `/v1` (Anthropic's own is `ANTHROPIC_API_URL`); the key goes
    in the `x-api-key` header. The API requires a token limit, so a request without
    `max_tokens` gets this adapter's `max_tokens`. `stop` becomes `stop_sequences`; the
    API has no `seed`, so a request's seed is not sent.
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
        max_tokens: int = 4096,
    ) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1 (the API requires a limit), got {max_tokens}")
        self.model = model
        self.max_tokens = max_tokens
        self._http = ModelHttpClient(base_url, headers=_headers(api_key), timeout=timeout, retry=retry, sleep=sleep, client=client)

    def _payload(self, request: LlmRequest) -> dict[str, Any]:
        """The JSON body `request` is sent as."""
        system, messages = _messages(request.messages)
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
        return payload

    async def complete(self, request: LlmRequest) -> LlmReply:
        async with aclosing(self.stream(request)) as events:
            return await collect(events)

    def check(self, *, timeout: float = 5.0) -> None:
        """The start-up check (`agentloop.adapters.llm.http.check_reachable`) of this model on its server, with its key."""
        self._http.check(self.model, timeout=timeout)

    async def stream(self, request: LlmRequest) -> AsyncGenerator[StreamEvent, None]:
        """Text and tool-use deltas as the API sends them, the usage, then the whole reply."""
        async with self._http.post("/messages", self._payload(request), time_left=request.time_left) as response:
            events = _Events()
            async for sse in sse_events(response):
                for out in events.feed(sse.data):
                    yield out
                    if isinstance(out, Finished):
                        return
        raise LlmCallError("the Anthropic API's stream was cut off before message_stop", kind=FailureKind.UNKNOWN, retryable=True)
