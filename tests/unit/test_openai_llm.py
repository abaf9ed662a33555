"""OpenAICompatibleLLM against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentloop import ChatMessage, FailureKind, IncomingMessage, LlmCallError, LlmRequest, Session, ToolCall, ToolSpec, tool
from agentloop.adapters.openai_llm import OpenAICompatibleLLM, check_reachable
from agentloop.errors import EndpointUnreachableError
from agentloop.testing import RecordingChannel
from agentloop.testing.http import ScriptedServer, completion
from systems import standard_pipeline


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as scripted:
        yield scripted


class SleepLog:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def run(llm: OpenAICompatibleLLM, request: LlmRequest) -> Any:
    async def go() -> Any:
        try:
            return await llm.complete(request)
        finally:
            await llm.aclose()
    return asyncio.run(go())


HELLO = LlmRequest((ChatMessage.system("be brief"), ChatMessage.user("hi")))


def test_text_reply_and_request_shape(server: ScriptedServer) -> None:
    server.reply(body=completion("hello there"))
    reply = run(OpenAICompatibleLLM(server.url, "m1", api_key="sk-test"), HELLO)
    assert reply.content == "hello there" and reply.model == "served-model" and reply.tool_calls == ()
    sent = server.requests[0]
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer sk-test"
    assert sent["body"]["model"] == "m1"
    assert sent["body"]["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


def test_tool_call_round_trip(server: ScriptedServer) -> None:
    server.reply(body=completion(None, [{"id": "c1", "type": "function",
                                          "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}]))
    spec = ToolSpec("weather", "the forecast", {"type": "object", "properties": {"city": {"type": "string"}}})
    call = ToolCall("c0", "clock", {})
    request = LlmRequest((ChatMessage.user("weather?"), ChatMessage.assistant(None, (call,)),
                          ChatMessage.tool("c0", "clock", "noon")), tools=(spec,), temperature=0.2)
    reply = run(OpenAICompatibleLLM(server.url, "m1"), request)
    assert reply.tool_calls == (ToolCall("c1", "weather", {"city": "Oslo"}),)
    body = server.requests[0]["body"]
    assert body["tools"] == [{"type": "function", "function": {"name": "weather", "description": "the forecast",
                                                               "parameters": spec.parameters}}]
    assert body["temperature"] == 0.2
    assert body["messages"][1]["tool_calls"] == [{"id": "c0", "type": "function",
                                                  "function": {"name": "clock", "arguments": "{}"}}]
    assert body["messages"][2] == {"role": "tool", "content": "noon", "tool_call_id": "c0", "name": "clock"}


def test_retries_429_and_5xx_with_exponential_backoff(server: ScriptedServer) -> None:
    server.reply(429, {"error": "slow down"})
    server.reply(503, {"error": "busy"})
    server.reply(body=completion("finally"))
    sleep = SleepLog()
    reply = run(OpenAICompatibleLLM(server.url, "m", max_retries=2, backoff=0.25, sleep=sleep), HELLO)
    assert reply.content == "finally"
    assert sleep.delays == [0.25, 0.5] and len(server.requests) == 3


def test_retry_after_header_is_honoured_and_capped(server: ScriptedServer) -> None:
    server.reply(429, {}, headers={"Retry-After": "120"})
    server.reply(body=completion("ok"))
    sleep = SleepLog()
    run(OpenAICompatibleLLM(server.url, "m", max_backoff=3.0, sleep=sleep), HELLO)
    assert sleep.delays == [3.0]


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [(429, {"error": "x"}, FailureKind.RATE_LIMIT), (500, {"error": "x"}, FailureKind.UNKNOWN),
     (400, {"error": "bad"}, FailureKind.VALIDATION)],
)
def test_error_kinds_after_retries(server: ScriptedServer, status: int, body: Any, kind: FailureKind) -> None:
    retried = status != 400
    for _ in range(3 if retried else 1):
        server.reply(status, body)
    sleep = SleepLog()
    with pytest.raises(LlmCallError) as caught:
        run(OpenAICompatibleLLM(server.url, "m", max_retries=2, sleep=sleep), HELLO)
    assert caught.value.kind is kind
    assert len(server.requests) == (3 if retried else 1) and len(sleep.delays) == (2 if retried else 0)


@pytest.mark.parametrize(
    "raw",
    [b"<html>oops</html>", b'{"choices": []}', b'{"choices": [{"message": {"content": 5}}]}'],
)
def test_garbage_is_a_validation_error_without_retry(server: ScriptedServer, raw: bytes) -> None:
    server.reply(raw=raw)
    with pytest.raises(LlmCallError) as caught:
        run(OpenAICompatibleLLM(server.url, "m", sleep=SleepLog()), HELLO)
    assert caught.value.kind is FailureKind.VALIDATION and len(server.requests) == 1


@pytest.mark.parametrize(("arguments", "error"), [("{nope", "not valid JSON"), ("[1, 2]", "not a JSON object")])
def test_unreadable_tool_arguments_reach_the_tool_loop_as_an_arguments_error(
    server: ScriptedServer, arguments: str, error: str
) -> None:
    call = {"id": "1", "function": {"name": "f", "arguments": arguments}}
    server.reply(raw=json.dumps({"choices": [{"message": {"tool_calls": [call]}}]}).encode())
    reply = run(OpenAICompatibleLLM(server.url, "m", sleep=SleepLog()), HELLO)
    (parsed,) = reply.tool_calls
    assert (parsed.name, parsed.arguments) == ("f", {}) and error in (parsed.arguments_error or "")


@pytest.mark.parametrize(("sent", "expected"), [({"city": "Oslo"}, {"city": "Oslo"}), (None, {}), ("", {})])
def test_arguments_sent_as_an_object_or_not_at_all_are_read(server: ScriptedServer, sent: Any, expected: Any) -> None:
    """A server sending the arguments object itself ended the turn as a malformed completion."""
    call = {"id": "1", "function": {"name": "f", "arguments": sent}}
    server.reply(raw=json.dumps({"choices": [{"message": {"tool_calls": [call]}}]}).encode())
    (parsed,) = run(OpenAICompatibleLLM(server.url, "m", sleep=SleepLog()), HELLO).tool_calls
    assert (parsed.arguments, parsed.arguments_error) == (expected, None)


@pytest.mark.parametrize("sent", [5, [1, 2], True])
def test_arguments_of_another_json_type_reach_the_tool_loop_as_an_arguments_error(server: ScriptedServer, sent: Any) -> None:
    call = {"id": "1", "function": {"name": "f", "arguments": sent}}
    server.reply(raw=json.dumps({"choices": [{"message": {"tool_calls": [call]}}]}).encode())
    (parsed,) = run(OpenAICompatibleLLM(server.url, "m", sleep=SleepLog()), HELLO).tool_calls
    assert parsed.arguments_error == "they are not a JSON object" and parsed.arguments_text == json.dumps(sent)


def test_timeout_is_retried_then_reported(server: ScriptedServer) -> None:
    server.reply(body=completion("late"), delay=0.5)
    server.reply(body=completion("on time"))
    sleep = SleepLog()
    reply = run(OpenAICompatibleLLM(server.url, "m", timeout=0.1, max_retries=1, sleep=sleep), HELLO)
    assert reply.content == "on time" and sleep.delays == [0.5]

    server.reply(body=completion("late"), delay=0.5)
    with pytest.raises(LlmCallError) as caught:
        run(OpenAICompatibleLLM(server.url, "m", timeout=0.1, max_retries=0), HELLO)
    assert caught.value.kind is FailureKind.TIMEOUT


def test_unreachable_server_is_unknown(server: ScriptedServer) -> None:
    url = server.url
    server.httpd.server_close()
    with pytest.raises(LlmCallError) as caught:
        run(OpenAICompatibleLLM(url, "m", max_retries=1, sleep=SleepLog()), HELLO)
    assert caught.value.kind is FailureKind.UNKNOWN


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny"


def weather_turn_over_http(server: ScriptedServer, tmp_path: Path, arguments: str, answer: str) -> list[str]:
    """One standard turn in which the served model calls `weather` with `arguments`, then
    answers `answer`; what the user received."""
    server.reply(body=completion(None, [{"id": "c1", "type": "function",
                                          "function": {"name": "weather", "arguments": arguments}}]))
    server.reply(body=completion(answer))
    channel = RecordingChannel()

    async def turn() -> None:
        llm = OpenAICompatibleLLM(server.url, "m")
        with standard_pipeline(llm, channel, data_dir=tmp_path, tools=[weather]) as pipeline:
            await pipeline.build().run_turn(Session("s", user_id="u"), IncomingMessage("Weather in Oslo?"))
        await llm.aclose()

    asyncio.run(turn())
    return channel.texts


def test_a_standard_turn_with_a_tool_call_over_http(server: ScriptedServer, tmp_path: Path) -> None:
    assert weather_turn_over_http(server, tmp_path, '{"city": "Oslo"}', "Oslo is sunny.") == ["Oslo is sunny."]
    second = server.requests[1]["body"]["messages"]
    assert second[-1] == {"role": "tool", "content": "Oslo: sunny", "tool_call_id": "c1", "name": "weather"}
    assert second[-2]["tool_calls"][0]["function"] == {"name": "weather", "arguments": '{"city": "Oslo"}'}


def test_unreadable_arguments_are_shown_back_to_the_model_as_it_wrote_them(server: ScriptedServer, tmp_path: Path) -> None:
    """The model was told its arguments were not valid JSON next to a call echoed as "{}"."""
    assert weather_turn_over_http(server, tmp_path, '{"city": Oslo}', "Which city?") == ["Which city?"]
    second = server.requests[1]["body"]["messages"]
    assert second[-2]["tool_calls"][0]["function"] == {"name": "weather", "arguments": '{"city": Oslo}'}
    assert "not valid JSON" in second[-1]["content"]


def test_check_reachable_accepts_any_http_answer_and_names_the_url_otherwise(server: ScriptedServer) -> None:
    check_reachable(server.url)  # the scripted server answers GET /models with 501: reachable all the same
    url = server.url
    server.close()
    with pytest.raises(EndpointUnreachableError) as caught:
        check_reachable(url, timeout=2.0)
    assert str(caught.value).startswith(f"cannot reach the model server at {url} (ConnectError:")
    with pytest.raises(EndpointUnreachableError, match="missing an 'http://' or 'https://' protocol"):
        check_reachable("localhost:11434/v1")
    with pytest.raises(EndpointUnreachableError, match=r"\(not a valid URL: "):
        check_reachable("http://[::1/v1")
