"""An LLM adapter for any OpenAI-compatible chat completions endpoint (OpenAI, Ollama,
vLLM, llama.cpp server, LiteLLM). Needs the `openai` extra (httpx, tenacity)."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import aclosing
from typing import Any

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
    ToolCall,
    ToolCallDelta,
    ToolSpec,
    Usage,
)
from agentloop.outcome import FailureKind
from agentloop.streaming import ReplyBuilder, collect


def _message(message: ChatMessage) -> dict[str, Any]:
    data: dict[str, Any] = {"role": message.role.value, "content": message.content}
    if message.tool_calls:
        data["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _arguments(c)}}
            for c in message.tool_calls
        ]
    if message.role is Role.TOOL:
        data["tool_call_id"] = message.tool_call_id
        if message.name:
            data["name"] = message.name
    return data


def _tool(spec: ToolSpec) -> dict[str, Any]:
    return {"type": "function", "function": {"name": spec.name, "description": spec.description, "parameters": spec.parameters}}


def _arguments(call: ToolCall) -> str:
    """The call's arguments as sent to the server: unreadable ones exactly as the model wrote them."""
    return call.arguments_text if call.arguments_text is not None else json.dumps(call.arguments)


def _text(content: Any) -> str | None:
    """Message text, given as a string or as a list of parts (text parts kept, others such as images skipped)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part if isinstance(part, str) else part.get("text") or "" for part in content)
    raise TypeError(f"content is {type(content).__name__}")


def _call_delta(call: Any, position: int) -> ToolCallDelta:
    """A tool call or a piece of one; arguments sent as an object instead of its JSON text are understood."""
    function = call.get("function") or {}
    arguments = function.get("arguments")
    fragment = "" if arguments is None else arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCallDelta(call.get("index", position), call.get("id"), function.get("name"), fragment)


def _usage(usage: dict[str, Any]) -> Usage:
    """A chat completion's `usage` as the API documents it: `prompt_tokens` (the whole prompt,
    its `prompt_tokens_details.cached_tokens` read from the prompt cache included) and
    `completion_tokens`. The API reports no cache writes."""
    details = usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0), int(cached or 0))


class _ChunkReader:
    """Reads the chunks of a streamed chat completion, or a whole completion read as one
    chunk, into stream events: one parser for both wire shapes."""

    def __init__(self) -> None:
        self.builder = ReplyBuilder()
        self.model: str | None = None
        self.stop_reason: str | None = None
        self.calls: dict[int, tuple[int, str | None]] = {}
        """the server's index of a call -> (the call's place in the reply, its id)"""
        self.placed = 0

    def read(self, body: Any, *, whole: bool = False) -> list[StreamEvent]:
        """The events in one chunk (`whole`: a complete non-streamed body); a VALIDATION
        `LlmCallError` for anything malformed, an UNKNOWN one for an error the server streams."""
        try:
            events = self._events(body, whole)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            raise LlmCallError(f"the model server sent a malformed completion ({exc!r})", kind=FailureKind.VALIDATION) from exc
        for event in events:
            self.builder.add(event)
        return events

    def _events(self, body: Any, whole: bool) -> list[StreamEvent]:
        if isinstance(body, dict) and body.get("error"):
            error = body["error"]
            said = error.get("message") if isinstance(error, dict) else error
            raise LlmCallError(f"the model server failed mid-answer: {' '.join(str(said).split())[:200]}", kind=FailureKind.UNKNOWN)
        self.model = body.get("model") or self.model
        events: list[StreamEvent] = []
        choices = body.get("choices") or []
        if choices or whole:
            choice = choices[0]
            part = choice["message"] if whole else choice.get("delta") or {}
            text = (_text(part.get("content")) or "") + (part.get("refusal") or "")  # a refusal is what the user is told
            if text:
                events.append(TextDelta(text))
            events.extend(self._placed(_call_delta(call, position)) for position, call in enumerate(part.get("tool_calls") or ()))
            self.stop_reason = choice.get("finish_reason") or self.stop_reason
        usage = body.get("usage")
        if usage:
            events.append(_usage(usage))
        return events

    def _placed(self, delta: ToolCallDelta) -> ToolCallDelta:
        """`delta` at its call's place in the reply: a new id at an index already taken starts another
        call, since Ollama sends every call of a step at index 0 (and vLLM repeats a call's id)."""
        place, known_id = self.calls.get(delta.index, (None, None))
        if place is None or (delta.id and known_id and delta.id != known_id):
            place, self.placed = self.placed, self.placed + 1
        self.calls[delta.index] = (place, delta.id or known_id)
        return ToolCallDelta(place, delta.id, delta.name, delta.arguments_fragment)

    def finished(self) -> Finished:
        return Finished(self.builder.reply(model=self.model, stop_reason=self.stop_reason))


def _retry_from_old_keywords(
    retry: RetryPolicy, *, max_retries: int | None, backoff: float | None, max_backoff: float | None
) -> RetryPolicy:
    """`retry`, or the policy the deprecated `max_retries`/`backoff`/`max_backoff` keywords
    describe (with a DeprecationWarning); both at once is a TypeError."""
    old = {"max_retries": max_retries, "backoff": backoff, "max_backoff": max_backoff}
    given = {name: value for name, value in old.items() if value is not None}
    if not given:
        return retry
    if retry != RetryPolicy():
        raise TypeError(f"pass either retry=RetryPolicy(...) or the deprecated {', '.join(given)}, not both")
    warnings.warn(
        f"OpenAICompatibleLLM's {' and '.join(given)} keywords are deprecated and go in the next release; "
        f"pass retry=RetryPolicy({', '.join(f'{name}={value!r}' for name, value in given.items())})",
        DeprecationWarning,
        stacklevel=3,
    )
    return RetryPolicy(
        retry.max_retries if max_retries is None else max_retries,
        retry.backoff if backoff is None else backoff,
        retry.max_backoff if max_backoff is None else max_backoff,
    )


class OpenAICompatibleLLM:
    """Chat completions with tool calls, streamed over server-sent events.

    Every call streams (`stream: true`, with usage in the last chunk); `complete` is the
    collected stream, and a server that answers with one JSON body instead works too.
    Retries 408, 409, 429, 5xx, timeouts and connection errors as `retry` allows, never past
    the request's `time_left`. Failures raise `LlmCallError` with kind
    RATE_LIMIT (429), TIMEOUT, VALIDATION (a 4xx or an unreadable body) or UNKNOWN
    (server or connection errors, a stream cut off), the server's explanation in one line.
    A request's `cache_key` is sent as `prompt_cache_key`, so the turns of one session reach
    the same prompt cache (`send_cache_key=False` for a server that refuses fields it does
    not know); the usage reports the cached part of the prompt. `context_window` is the model's
    window when known (given, or read by `check` from the server's listing).
    `max_retries`, `backoff` and `max_backoff` are deprecated: pass `retry=RetryPolicy(...)`.
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
        max_retries: int | None = None,
        backoff: float | None = None,
        max_backoff: float | None = None,
        send_cache_key: bool = True,
    ) -> None:
        self.model = model
        self.context_window = given_window(context_window)
        self.send_cache_key = send_cache_key
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        retry = _retry_from_old_keywords(retry, max_retries=max_retries, backoff=backoff, max_backoff=max_backoff)
        self._http = ModelHttpClient(base_url, headers=headers, timeout=timeout, retry=retry, sleep=sleep, client=client)

    def _payload(self, request: LlmRequest) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": request.model or self.model,
            "messages": [_message(m) for m in request.messages],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            payload["tools"] = [_tool(t) for t in request.tools]
        if request.response_schema is not None:
            answer = request.response_schema
            payload["response_format"] = {"type": "json_schema", "json_schema": {
                "name": answer.name, "description": answer.description, "schema": answer.schema}}
        settings = {"temperature": request.temperature, "max_tokens": request.max_tokens, "seed": request.seed}
        payload.update({key: value for key, value in settings.items() if value is not None})
        if request.stop:
            payload["stop"] = list(request.stop)
        if request.cache_key is not None and self.send_cache_key:
            payload["prompt_cache_key"] = request.cache_key
        return payload

    async def complete(self, request: LlmRequest) -> LlmReply:
        async with aclosing(self.stream(request)) as events:
            return await collect(events)

    def check(self, *, timeout: float = 5.0) -> None:
        """The start-up check (`agentloop.adapters.llm.http.check_reachable`) of this model on its server, with its key;
        the context window its listing gives becomes `context_window` unless one was given."""
        listed = self._http.check(self.model, timeout=timeout)
        self.context_window = self.context_window or listed

    async def stream(self, request: LlmRequest) -> AsyncGenerator[StreamEvent, None]:
        """Text and tool-call deltas as the server sends them, usage, then the whole reply."""
        reader = _ChunkReader()
        async with self._http.post("/chat/completions", self._payload(request), time_left=request.time_left) as response:
            if not is_event_stream(response):
                for event in reader.read(await json_body(response), whole=True):
                    yield event
                yield reader.finished()
                return
            done = False
            async for sse in sse_events(response):
                if sse.data.strip() == "[DONE]":
                    done = True
                    break
                try:
                    body = json.loads(sse.data)
                except ValueError as exc:
                    raise LlmCallError(f"the model server streamed an event that is not JSON ({exc})", kind=FailureKind.VALIDATION) from exc
                for event in reader.read(body):
                    yield event
        if not done and reader.stop_reason is None:
            raise LlmCallError(
                "the model server's stream ended before the answer was finished", kind=FailureKind.UNKNOWN, retryable=True
            )
        yield reader.finished()


def check_reachable(
    base_url: str,
    *,
    model: str | None = None,
    api_key: str | None = None,
    timeout: float = 5.0,
    headers: Mapping[str, str] | None = None,
) -> int | None:
    """Raise `EndpointUnreachableError` unless an HTTP server answers at `base_url`, and
    `UnknownModelError` when it lists its models (GET `<base_url>/models`) without `model`.
    `headers` replace the bearer `api_key`, for a server that authenticates otherwise.

    One GET costs no tokens; a server without the listing is taken at its word. The model's
    context window, where its entry in the listing gives one, is the answer.
    """
    if headers is None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return _check_reachable(base_url, model=model, timeout=timeout, headers=headers)
