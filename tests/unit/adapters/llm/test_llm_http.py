"""ModelHttpClient against a real HTTP server on 127.0.0.1: retries, deadlines, one-line errors, any event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from email.utils import formatdate
from typing import Any

import pytest

from agentloop import FailureKind, LlmCallError
from agentloop.adapters.llm.http import ModelHttpClient, RetryPolicy, SseEvent, json_body, sse_events
from agentloop.errors import ModelServerError
from agentloop.testing.http import ScriptedServer


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as scripted:
        yield scripted


class SleepLog:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def post(http: ModelHttpClient, *, time_left: float | None = None) -> Any:
    async def go() -> Any:
        async with http.post("/chat/completions", {"q": 1}, time_left=time_left) as response:
            return await json_body(response)

    return asyncio.run(go())


def test_retries_follow_the_policy_and_honour_retry_after(server: ScriptedServer) -> None:
    server.reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "2"})
    server.reply(503, {"error": "busy"})
    server.reply(429, {}, headers={"retry-after-ms": "1500"})
    server.reply(500, {}, headers={"Retry-After": formatdate(time.time() + 3600, usegmt=True)})
    server.reply(body={"ok": True})
    sleep = SleepLog()
    http = ModelHttpClient(server.url, retry=RetryPolicy(max_retries=4, backoff=0.25, max_backoff=10.0), sleep=sleep)
    assert post(http) == {"ok": True}
    assert sleep.delays == [2.0, 0.5, 1.5, 10.0] and len(server.requests) == 5


def test_a_request_timeout_or_conflict_is_tried_again_as_the_official_sdks_do(server: ScriptedServer) -> None:
    server.reply(408, {"error": {"message": "request timed out"}})
    server.reply(409, {"error": {"message": "a lock is held"}})
    server.reply(body={"ok": True})
    sleep = SleepLog()
    assert post(ModelHttpClient(server.url, retry=RetryPolicy(max_retries=2, backoff=0.25), sleep=sleep)) == {"ok": True}
    assert sleep.delays == [0.25, 0.5] and len(server.requests) == 3
    server.reply(408, {"error": {"message": "request timed out"}})
    with pytest.raises(ModelServerError) as caught:
        post(ModelHttpClient(server.url, retry=RetryPolicy(max_retries=0)))
    assert caught.value.kind is FailureKind.TIMEOUT and "HTTP 408" in str(caught.value)


@pytest.mark.parametrize("content_type", ["application/json", "text/event-stream"])
def test_a_body_that_cannot_be_decoded_is_one_line_llm_call_error(server: ScriptedServer, content_type: str) -> None:
    server.reply(raw=b"not gzip at all", headers={"Content-Encoding": "gzip", "Content-Type": content_type})
    with pytest.raises(LlmCallError, match="^the model server sent a body that cannot be decoded") as caught:
        post(ModelHttpClient(server.url, sleep=SleepLog()))
    assert caught.value.kind is FailureKind.VALIDATION and len(server.requests) == 1


def test_the_last_error_is_raised_when_retries_run_out(server: ScriptedServer) -> None:
    for _ in range(2):
        server.reply(503, {"error": {"message": "the upstream model is overloaded"}})
    with pytest.raises(ModelServerError) as caught:
        post(ModelHttpClient(server.url, retry=RetryPolicy(max_retries=1), sleep=SleepLog()))
    assert str(caught.value) == "the model server failed (HTTP 503): the upstream model is overloaded"
    assert caught.value.kind is FailureKind.UNKNOWN and caught.value.status == 503 and len(server.requests) == 2


def test_a_wait_that_would_end_after_the_deadline_is_not_started(server: ScriptedServer) -> None:
    server.reply(429, {"error": {"message": "rate limit reached"}}, headers={"Retry-After": "5"})
    server.reply(body={"ok": True})
    started = time.monotonic()
    with pytest.raises(ModelServerError) as caught:
        post(ModelHttpClient(server.url, retry=RetryPolicy(max_retries=3)), time_left=2.0)
    assert time.monotonic() - started < 1.5 and len(server.requests) == 1
    assert caught.value.kind is FailureKind.RATE_LIMIT
    assert str(caught.value) == (
        "the model server is rate limiting requests (HTTP 429): rate limit reached; "
        "not retried: the next attempt would start after the caller's deadline"
    )


def test_an_attempt_waits_no_longer_than_the_time_left(server: ScriptedServer) -> None:
    server.reply(body={"ok": True}, delay=2.0)
    started = time.monotonic()
    with pytest.raises(LlmCallError) as caught:
        post(ModelHttpClient(server.url, timeout=60.0, retry=RetryPolicy(max_retries=2, backoff=0.5)), time_left=0.3)
    assert caught.value.kind is FailureKind.TIMEOUT and time.monotonic() - started < 1.0
    assert "caller's deadline" in str(caught.value) and len(server.requests) == 1


def test_an_html_error_page_is_one_short_line(server: ScriptedServer) -> None:
    page = (
        "<!DOCTYPE html>\n<html><head><title>404 Not Found</title><style>body { color: red }</style></head>\n"
        "<body><h1>Not Found</h1><p>The requested URL was not found on this server.</p>" + "<p>padding</p>\n" * 400
        + "</body></html>"
    )
    server.reply(404, raw=page.encode(), headers={"Content-Type": "text/html"})
    with pytest.raises(LlmCallError) as caught:
        post(ModelHttpClient(server.url, sleep=SleepLog()))
    assert str(caught.value) == (
        f"the model server refused the request (HTTP 404 at {server.url}/chat/completions): 404 Not Found; "
        "check the base URL (it usually ends in /v1)"
    )
    assert caught.value.kind is FailureKind.VALIDATION and len(server.requests) == 1


def test_a_page_without_a_title_is_its_text_without_markup_and_capped(server: ScriptedServer) -> None:
    server.reply(400, raw=("<div>\n  <b>Bad</b>   request: " + "x " * 300 + "</div>").encode())
    with pytest.raises(LlmCallError) as caught:
        post(ModelHttpClient(server.url))
    said = str(caught.value).split("): ", 1)[1]
    assert said.startswith("Bad request: x x") and said.endswith("…") and len(said) <= 200 and "\n" not in said


def test_one_client_serves_one_event_loop_after_another(server: ScriptedServer) -> None:
    """The adapter's client stayed bound to the first loop: the second asyncio.run failed with
    'Event loop is closed'."""
    http = ModelHttpClient(server.url)
    server.reply(body={"n": 1})
    server.reply(body={"n": 2})
    assert (post(http), post(http)) == ({"n": 1}, {"n": 2})


def test_server_sent_events_are_read_as_the_standard_says(server: ScriptedServer) -> None:
    server.stream([{"a": 1}, "first\ndata: second", "x\n\n: a comment\nevent: ping\ndata: {}"], done=False)

    async def read() -> list[SseEvent]:
        async with ModelHttpClient(server.url).post("/chat/completions", {}) as response:
            return [event async for event in sse_events(response)]

    assert asyncio.run(read()) == [
        SseEvent("message", '{"a": 1}'), SseEvent("message", "first\nsecond"), SseEvent("message", "x"), SseEvent("ping", "{}"),
    ]
