"""What every HTTP model adapter shares: retries within the caller's time, one-line server
errors, server-sent events, and an httpx client that works from any event loop.

Needs httpx and tenacity (the `openai` or `anthropic` extra).
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import html
import json
import re
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import attrs
import httpx
import tenacity

from agentloop._log import get_logger
from agentloop.errors import (
    ApiKeyRefusedError,
    ApiPathError,
    EndpointUnreachableError,
    LlmCallError,
    ModelServerError,
    UnknownModelError,
)
from agentloop.outcome import FailureKind

__all__ = ["ModelHttpClient", "RetryPolicy", "SseEvent", "check_reachable", "server_message", "sse_events"]

_log = get_logger("agentloop.llm_http")

MESSAGE_LIMIT = 200
"""The longest server explanation an error message quotes, in characters."""


@attrs.frozen
class RetryPolicy:
    """How often and how patiently a failed model call is tried again.

    A 408, 409, 429 or 5xx, a timeout or a lost connection is retried up to `max_retries` times,
    waiting `backoff * 2**n` seconds before retry n+1, or the server's Retry-After
    when it sends one; never longer than `max_backoff`.
    """

    max_retries: int = attrs.field(default=2, validator=attrs.validators.ge(0))
    backoff: float = attrs.field(default=0.5, validator=attrs.validators.ge(0))
    max_backoff: float = attrs.field(default=30.0, validator=attrs.validators.ge(0))


@attrs.frozen
class SseEvent:
    """One server-sent event: its `event` name ("message" when unnamed) and its data."""

    event: str
    data: str


def server_message(response: httpx.Response) -> str:
    """What the server said went wrong, on one short line: the JSON error's message when
    there is one, else the page's title or text without markup; at most MESSAGE_LIMIT characters."""
    text = response.text
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    said = _json_message(body)
    if not said:
        title = re.search(r"<title[^>]*>(.*?)</title>", text, re.I | re.S)
        said = html.unescape(title.group(1) if title else re.sub(r"<(script|style)\b.*?</\1\s*>|<[^>]*>", " ", text, flags=re.I | re.S))
    said = " ".join(said.split())
    return said if len(said) <= MESSAGE_LIMIT else said[: MESSAGE_LIMIT - 1].rstrip() + "…"


def _json_message(body: Any) -> str:
    """The explanation in a JSON error body (`error.message`, `error`, `message` or `detail`), or ""."""
    if not isinstance(body, dict):
        return ""
    error = body.get("error")
    for said in (error.get("message") if isinstance(error, dict) else error, body.get("message"), body.get("detail")):
        if isinstance(said, str) and said.strip():
            return said
    return ""


def http_error(response: httpx.Response, url: str) -> ModelServerError:
    """The `LlmCallError` for an HTTP error status: 408, 409, 429 and 5xx are retryable (as the
    OpenAI and Anthropic SDKs retry them), other 4xx are not."""
    status = response.status_code
    said = server_message(response)
    detail = f": {said}" if said else ""
    if status in (408, 409):
        return ModelServerError(
            f"the model server could not take the request just now (HTTP {status}){detail}",
            status=status, kind=FailureKind.TIMEOUT if status == 408 else FailureKind.UNKNOWN, retryable=True,
            retry_after=_retry_after(response),
        )
    if status == 429:
        return ModelServerError(
            f"the model server is rate limiting requests (HTTP 429){detail}",
            status=status, kind=FailureKind.RATE_LIMIT, retryable=True, retry_after=_retry_after(response),
        )
    if status >= 500:
        return ModelServerError(
            f"the model server failed (HTTP {status}){detail}",
            status=status, kind=FailureKind.UNKNOWN, retryable=True, retry_after=_retry_after(response),
        )
    where, hint = (f" at {url}", "; check the base URL (it usually ends in /v1)") if status == 404 else ("", "")
    return ModelServerError(
        f"the model server refused the request (HTTP {status}{where}){detail}{hint}", status=status, kind=FailureKind.VALIDATION
    )


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds the server asked to wait: `retry-after-ms`, or Retry-After in seconds or as an HTTP date."""
    milliseconds = response.headers.get("retry-after-ms")
    value = response.headers.get("retry-after")
    try:
        if milliseconds is not None:
            return max(0.0, float(milliseconds) / 1000)
        if value is not None:
            return max(0.0, float(value))
    except ValueError:
        pass
    if value is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@contextmanager
def transport_errors(url: str) -> Iterator[None]:
    """Turn httpx's timeouts and connection failures into retryable `LlmCallError`s, and a body
    that cannot be decoded (a broken gzip, say) into a VALIDATION one."""
    try:
        yield
    except httpx.DecodingError as exc:
        raise LlmCallError(f"the model server sent a body that cannot be decoded ({exc})", kind=FailureKind.VALIDATION) from exc
    except httpx.TimeoutException as exc:
        raise LlmCallError(f"the model server did not answer in time ({exc!r})", kind=FailureKind.TIMEOUT, retryable=True) from exc
    except httpx.TransportError as exc:
        raise LlmCallError(f"cannot reach the model server at {url} ({exc!r})", kind=FailureKind.UNKNOWN, retryable=True) from exc


async def sse_events(response: httpx.Response) -> AsyncIterator[SseEvent]:
    """The server-sent events of a streamed response, in order (comments and retry hints skipped)."""
    event, data = "", list[str]()
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield SseEvent(event or "message", "\n".join(data))
            event, data = "", []
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            data.append(value)
        elif field == "event":
            event = value
    if data:
        yield SseEvent(event or "message", "\n".join(data))


def is_event_stream(response: httpx.Response) -> bool:
    """Whether the server streams its answer (it may answer a streamed request with plain JSON)."""
    return str(response.headers.get("content-type", "")).startswith("text/event-stream")


async def json_body(response: httpx.Response) -> Any:
    """The response body as JSON; a VALIDATION `LlmCallError` when it is not."""
    await response.aread()
    try:
        return response.json()
    except ValueError as exc:
        raise LlmCallError(
            f"the model server sent a body that is not JSON ({exc}): {server_message(response)}", kind=FailureKind.VALIDATION
        ) from exc


class _Budget(tenacity.stop.stop_base):
    """The caller's deadline on the monotonic clock, a tenacity stop condition for it, and
    whether it ended the retries."""

    def __init__(self, time_left: float | None) -> None:
        self.deadline = None if time_left is None else time.monotonic() + time_left
        self.ended_retries = False

    def left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def __call__(self, state: tenacity.RetryCallState) -> bool:
        """Stop rather than sleep past the deadline (tenacity computes the wait before asking)."""
        left = self.left()
        self.ended_retries = left is not None and state.upcoming_sleep >= left
        return self.ended_retries


class ModelHttpClient:
    """POSTs to one model server, retrying as `retry` allows within the caller's time.

    Each call opens its own httpx client (sharing one TLS context), so the adapter works
    from any event loop: `asyncio.run` twice in a row, or `run_turn_sync` turn after turn.
    A `client` given is used as is, and closed by whoever made it.
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        retry: RetryPolicy = RetryPolicy(),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers or {})
        self.timeout = timeout
        self.retry = retry
        self._sleep = sleep
        self._client = client

    def check(self, model: str | None, *, timeout: float = 5.0) -> int | None:
        """`check_reachable` on this server, with this client's headers (its key); the model's listed window."""
        return check_reachable(self.base_url, model=model, timeout=min(timeout, self.timeout), headers=self.headers)

    @functools.cached_property
    def _tls(self) -> ssl.SSLContext:
        """Built once: loading the CA bundle is slow, a new client with this context is cheap."""
        return httpx.create_ssl_context()

    @asynccontextmanager
    async def _session(self) -> AsyncIterator[httpx.AsyncClient]:
        if self._client is not None:
            yield self._client
            return
        # Always the cached context: for verify=True httpx would load the CA bundle again for
        # each client, even for an http:// URL, holding the event loop up on every call.
        async with httpx.AsyncClient(verify=self._tls) as client:
            yield client

    @asynccontextmanager
    async def post(self, path: str, payload: Mapping[str, Any], *, time_left: float | None = None) -> AsyncIterator[httpx.Response]:
        """A successful response to POST `path`, its body still unread (to stream it).

        Retries per the policy; with `time_left`, never starts a wait that would end after
        it and bounds each attempt by it. Failures are `LlmCallError`s, also while the
        body is read inside the block.
        """
        url = self.base_url + path
        budget = _Budget(time_left)
        retrying = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception(lambda exc: isinstance(exc, LlmCallError) and exc.retryable),
            wait=self._wait,
            stop=tenacity.stop_after_attempt(self.retry.max_retries + 1) | budget,
            sleep=self._sleep,
            before_sleep=lambda state: _log.warning(
                "llm.retry", url=url, attempt=state.attempt_number, delay_s=state.upcoming_sleep,
                error=str(state.outcome.exception() if state.outcome else None),
            ),
            reraise=True,
        )
        async with self._session() as client:
            try:
                response: httpx.Response = await retrying(self._attempt, client, url, payload, budget)
            except LlmCallError as exc:
                if not budget.ended_retries:
                    raise
                raise _past_deadline(exc) from exc
            try:
                with transport_errors(url):
                    yield response
            finally:
                await response.aclose()

    def _wait(self, state: tenacity.RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        asked = error.retry_after if isinstance(error, ModelServerError) else None
        if asked is None:
            asked = self.retry.backoff * 2 ** (state.attempt_number - 1)
        return min(self.retry.max_backoff, asked)

    async def _attempt(
        self, client: httpx.AsyncClient, url: str, payload: Mapping[str, Any], budget: _Budget
    ) -> httpx.Response:
        left = budget.left()
        if left is not None and left <= 0:
            raise LlmCallError("no time was left to call the model server before the deadline", kind=FailureKind.TIMEOUT)
        timeout = self.timeout if left is None else min(self.timeout, left)
        request = client.build_request("POST", url, json=payload, headers=self.headers, timeout=timeout)
        with transport_errors(url):
            response = await client.send(request, stream=True)
            if response.status_code < 400:
                return response
            try:
                await response.aread()
            finally:
                await response.aclose()
        raise http_error(response, url)


def _past_deadline(exc: LlmCallError) -> LlmCallError:
    """`exc`, saying that the caller's deadline, not the retry count, ended the retries."""
    message = f"{exc}; not retried: the next attempt would start after the caller's deadline"
    if isinstance(exc, ModelServerError):
        return ModelServerError(message, status=exc.status, kind=exc.kind, retry_after=exc.retry_after)
    return LlmCallError(message, kind=exc.kind)


CONTEXT_WINDOW_FIELDS = ("max_model_len", "context_length", "loaded_context_length", "max_input_tokens")
"""The fields of a model's entry in a listing that give its context window in tokens: vLLM's,
OpenRouter's, LM Studio's (`loaded_context_length`, the window the loaded model serves; its
`max_context_length` is the most the model could be loaded with, often far more), and the
Anthropic Models API's limit of a prompt (`max_input_tokens`)."""


def check_reachable(base_url: str, *, model: str | None, timeout: float, headers: Mapping[str, str]) -> int | None:
    """The start-up check: one authenticated GET `<base_url>/models`, which costs no tokens;
    `model`'s context window when its entry in the listing gives one (`CONTEXT_WINDOW_FIELDS`), else None.

    Raises `EndpointUnreachableError` when nothing answers, `ApiKeyRefusedError` on 401 or 403,
    `ApiPathError` on 404 (a base URL without its /v1), and `UnknownModelError` when the
    listing lacks `model` (unless it is the first page of a longer listing, `has_more`: then the
    check is inconclusive); each provider gives the `headers` that authenticate with its API.
    Any other answer (a listing of another shape, 405, a 5xx) is taken at its word, the
    status logged. Applications call it once before a conversation, so a wrong URL, key or
    model name is one clear message instead of a fallback answer on every turn.
    """
    url = base_url.rstrip("/") + "/models"
    try:
        response = httpx.get(url, timeout=timeout, headers=headers)
    except httpx.InvalidURL as exc:
        raise EndpointUnreachableError(base_url, f"not a valid URL: {exc}") from exc
    except httpx.TransportError as exc:
        raise EndpointUnreachableError(base_url, type(exc).__name__ + (f": {exc}" if str(exc) else "")) from exc
    if response.status_code in (401, 403):
        raise ApiKeyRefusedError(url, response.status_code)
    if response.status_code == 404:
        raise ApiPathError(url)
    if not response.is_success:
        _log.warning("llm.check_inconclusive", url=url, status=response.status_code, said=server_message(response))
        return None
    if model is None:
        return None
    try:
        listing = response.json()
        entries = {str(entry["id"]): entry for entry in listing["data"]}
    except (ValueError, KeyError, TypeError):
        return None
    entry = entries.get(model, entries.get(f"{model}:latest"))
    if entry is None and listing.get("has_more") is True:  # one page of a longer listing (Anthropic's)
        _log.warning("llm.check_inconclusive", url=url, model=model, said="the model is not on the listing's first page")
        return None
    if entry is None:
        raise UnknownModelError(base_url, model, tuple(entries))
    return _listed_window(entry)


def given_window(window: int | None) -> int | None:
    """A `context_window=` given to an adapter: None (read from the listing by `check`) or at least one token."""
    if window is not None and window < 1:
        raise ValueError(f"context_window must be at least 1 token, or None to read it from the model listing; got {window}")
    return window


def _listed_window(entry: Mapping[str, Any]) -> int | None:
    """The context window a listing's entry for one model gives (the first of `CONTEXT_WINDOW_FIELDS`
    that is a positive whole number), or None."""
    for field in CONTEXT_WINDOW_FIELDS:
        value = entry.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
