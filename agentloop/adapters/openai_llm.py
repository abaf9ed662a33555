"""An LLM adapter for any OpenAI-compatible chat completions endpoint (OpenAI, Ollama,
vLLM, llama.cpp server). Needs the `openai` extra (httpx)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import structlog

from agentloop.errors import EndpointUnreachableError, LlmCallError
from agentloop.messages import ChatMessage, LlmReply, LlmRequest, Role, ToolCall, ToolSpec
from agentloop.outcome import FailureKind

_log = structlog.get_logger("agentloop.openai_llm")


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


def _tool_call(call: Any) -> ToolCall:
    """One tool call; arguments that are not a JSON object become `arguments_error` (their
    text kept). A server that sends the object itself instead of its JSON text is understood."""
    call_id, name, sent = call["id"], call["function"]["name"], call["function"].get("arguments")
    if sent is None or sent == "":
        return ToolCall(call_id, name)
    if isinstance(sent, dict):
        return ToolCall(call_id, name, sent)
    text = sent if isinstance(sent, str) else json.dumps(sent)
    try:
        arguments = json.loads(text)
    except json.JSONDecodeError as exc:
        return ToolCall(call_id, name, arguments_error=f"they are not valid JSON ({exc})", arguments_text=text)
    if not isinstance(arguments, dict):
        return ToolCall(call_id, name, arguments_error="they are not a JSON object", arguments_text=text)
    return ToolCall(call_id, name, arguments)


def _reply(body: Any) -> LlmReply:
    """Parse a chat completion body; raises VALIDATION for anything malformed."""
    try:
        message = body["choices"][0]["message"]
        calls = tuple(_tool_call(call) for call in message.get("tool_calls") or ())
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise TypeError(f"content is {type(content).__name__}")
        return LlmReply(content, calls, body.get("model"))
    except (KeyError, IndexError, TypeError, AttributeError, json.JSONDecodeError) as exc:
        raise LlmCallError(f"the model server sent a malformed completion ({exc!r})", kind=FailureKind.VALIDATION) from exc


class OpenAICompatibleLLM:
    """Chat completions with tool calls over httpx.

    Retries 429, 5xx, timeouts and connection errors up to `max_retries` times, waiting
    `backoff * 2**attempt` seconds (or the server's Retry-After, capped at `max_backoff`).
    Failures raise `LlmCallError` with kind RATE_LIMIT (429), TIMEOUT, VALIDATION
    (a 4xx or an unreadable body) or UNKNOWN (server or connection errors).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must not be negative, got {max_retries}")
        self.model = model
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._sleep = sleep
        self._url = base_url.rstrip("/") + "/chat/completions"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.AsyncClient(timeout=timeout, headers=headers)
        self._owns_client = client is None

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    def _payload(self, request: LlmRequest) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": request.model or self.model, "messages": [_message(m) for m in request.messages]}
        if request.tools:
            payload["tools"] = [_tool(t) for t in request.tools]
        if request.temperature is not None:
            payload["temperature"] = request.temperature
        return payload

    async def complete(self, request: LlmRequest) -> LlmReply:
        payload = self._payload(request)
        attempt = 0
        while True:
            result, retry_after = await self._attempt(payload)
            if isinstance(result, LlmReply):
                return result
            if not result.retryable or attempt >= self.max_retries:
                raise result
            delay = min(self.max_backoff, retry_after if retry_after is not None else self.backoff * 2**attempt)
            _log.warning("llm.retry", url=self._url, attempt=attempt + 1, delay_s=delay, error=str(result))
            attempt += 1
            await self._sleep(delay)

    async def _attempt(self, payload: dict[str, Any]) -> tuple[LlmReply | LlmCallError, float | None]:
        try:
            response = await self._client.post(self._url, json=payload)
        except httpx.TimeoutException as exc:
            return LlmCallError(f"the model server did not answer in time ({exc!r})", kind=FailureKind.TIMEOUT, retryable=True), None
        except httpx.TransportError as exc:
            return LlmCallError(f"cannot reach the model server at {self._url} ({exc!r})", kind=FailureKind.UNKNOWN, retryable=True), None
        status = response.status_code
        if status == 429:
            return LlmCallError("the model server is rate limiting requests (HTTP 429)", kind=FailureKind.RATE_LIMIT, retryable=True), _retry_after(response)
        if status >= 500:
            return LlmCallError(f"the model server failed (HTTP {status})", kind=FailureKind.UNKNOWN, retryable=True), _retry_after(response)
        if status >= 400:
            return LlmCallError(
                f"the model server refused the request (HTTP {status}): {response.text[:200]}", kind=FailureKind.VALIDATION
            ), None
        try:
            body = response.json()
        except ValueError as exc:
            return LlmCallError(f"the model server sent a body that is not JSON ({exc})", kind=FailureKind.VALIDATION), None
        try:
            return _reply(body), None
        except LlmCallError as exc:
            return exc, None


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def check_reachable(base_url: str, *, timeout: float = 5.0) -> None:
    """Raise `EndpointUnreachableError` unless an HTTP server answers at `base_url`.

    One GET of `<base_url>/models`; any HTTP status counts as reachable, so it costs no
    tokens and needs no key. Applications call it once before a conversation so a wrong
    URL is one clear message instead of a fallback answer on every turn.
    """
    try:
        httpx.get(base_url.rstrip("/") + "/models", timeout=timeout)
    except httpx.InvalidURL as exc:
        raise EndpointUnreachableError(base_url, f"not a valid URL: {exc}") from exc
    except httpx.TransportError as exc:
        raise EndpointUnreachableError(base_url, type(exc).__name__ + (f": {exc}" if str(exc) else "")) from exc
