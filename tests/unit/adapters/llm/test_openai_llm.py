"""OpenAICompatibleLLM against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentloop import (
    ChatMessage, FailureKind, Finished, IncomingMessage, LlmCallError, LlmReply, LlmRequest, Session, StreamEvent,
    TextDelta, ToolCall, ToolCallDelta, ToolSpec, TurnOutcome, Usage, tool,
)
from agentloop.adapters.llm.http import RetryPolicy
from agentloop.adapters.llm.openai import OpenAICompatibleLLM, check_reachable
from agentloop.errors import ApiKeyRefusedError, ApiPathError, EndpointUnreachableError, UnknownModelError
from agentloop.testing import RecordingChannel
from agentloop.testing.http import ScriptedServer, chunk, completion, streamed_completion, usage_body
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
    return asyncio.run(llm.complete(request))


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
    reply = run(OpenAICompatibleLLM(server.url, "m", retry=RetryPolicy(max_retries=2, backoff=0.25), sleep=sleep), HELLO)
    assert reply.content == "finally"
    assert sleep.delays == [0.25, 0.5] and len(server.requests) == 3


def test_retry_after_header_is_honoured_and_capped(server: ScriptedServer) -> None:
    server.reply(429, {}, headers={"Retry-After": "120"})
    server.reply(body=completion("ok"))
    sleep = SleepLog()
    run(OpenAICompatibleLLM(server.url, "m", retry=RetryPolicy(max_backoff=3.0), sleep=sleep), HELLO)
    assert sleep.delays == [3.0]


def test_the_old_retry_keywords_still_work_with_a_deprecation_warning(server: ScriptedServer) -> None:
    server.reply(503, {"error": "busy"})
    server.reply(body=completion("finally"))
    sleep = SleepLog()
    with pytest.warns(DeprecationWarning, match=r"retry=RetryPolicy\(max_retries=1, backoff=0.25\)"):
        llm = OpenAICompatibleLLM(server.url, "m", max_retries=1, backoff=0.25, sleep=sleep)
    assert run(llm, HELLO).content == "finally" and sleep.delays == [0.25]
    with pytest.raises(TypeError, match="not both"):
        OpenAICompatibleLLM(server.url, "m", retry=RetryPolicy(max_retries=3), max_retries=1)


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
        run(OpenAICompatibleLLM(server.url, "m", retry=RetryPolicy(max_retries=2), sleep=sleep), HELLO)
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
    reply = run(OpenAICompatibleLLM(server.url, "m", timeout=0.1, retry=RetryPolicy(max_retries=1), sleep=sleep), HELLO)
    assert reply.content == "on time" and sleep.delays == [0.5]

    server.reply(body=completion("late"), delay=0.5)
    with pytest.raises(LlmCallError) as caught:
        run(OpenAICompatibleLLM(server.url, "m", timeout=0.1, retry=RetryPolicy(max_retries=0)), HELLO)
    assert caught.value.kind is FailureKind.TIMEOUT


def test_unreachable_server_is_unknown(server: ScriptedServer) -> None:
    url = server.url
    server.httpd.server_close()
    with pytest.raises(LlmCallError) as caught:
        run(OpenAICompatibleLLM(url, "m", retry=RetryPolicy(max_retries=1), sleep=SleepLog()), HELLO)
    assert caught.value.kind is FailureKind.UNKNOWN


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny"


def weather_turn_over_http(
    server: ScriptedServer, tmp_path: Path, arguments: str, answer: str, *, streamed: bool = False
) -> list[str]:
    """One standard turn in which the served model calls `weather` with `arguments`, then
    answers `answer` (whole, or streamed in chunks); what the user received."""
    if streamed:
        server.stream(streamed_completion(None, [("c1", "weather", arguments)]))
        server.stream(streamed_completion(answer))
    else:
        server.reply(body=completion(None, [{"id": "c1", "type": "function",
                                              "function": {"name": "weather", "arguments": arguments}}]))
        server.reply(body=completion(answer))
    channel = RecordingChannel()

    async def turn() -> None:
        llm = OpenAICompatibleLLM(server.url, "m", sleep=SleepLog())
        with standard_pipeline(llm, channel, data_dir=tmp_path, tools=[weather]) as pipeline:
            await pipeline.build().run_turn(Session("s", user_id="u"), IncomingMessage("Weather in Oslo?"))

    asyncio.run(turn())
    return channel.texts


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_standard_turn_with_a_tool_call_over_http(server: ScriptedServer, tmp_path: Path, streamed: bool) -> None:
    assert weather_turn_over_http(server, tmp_path, '{"city": "Oslo"}', "Oslo is sunny.", streamed=streamed) == ["Oslo is sunny."]
    second = server.requests[1]["body"]["messages"]
    assert second[-1] == {"role": "tool", "content": "Oslo: sunny", "tool_call_id": "c1", "name": "weather"}
    assert second[-2]["tool_calls"][0]["function"] == {"name": "weather", "arguments": '{"city": "Oslo"}'}


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_unreadable_arguments_are_shown_back_to_the_model_as_it_wrote_them(
    server: ScriptedServer, tmp_path: Path, streamed: bool
) -> None:
    """The model was told its arguments were not valid JSON next to a call echoed as "{}"."""
    assert weather_turn_over_http(server, tmp_path, '{"city": Oslo}', "Which city?", streamed=streamed) == ["Which city?"]
    second = server.requests[1]["body"]["messages"]
    assert second[-2]["tool_calls"][0]["function"] == {"name": "weather", "arguments": '{"city": Oslo}'}
    assert "not valid JSON" in second[-1]["content"]


def test_check_reachable_accepts_a_listing_or_an_inconclusive_answer_and_names_the_url_otherwise(server: ScriptedServer) -> None:
    check_reachable(server.url)  # a listing the check cannot read: taken at its word
    server.models_status = 503
    check_reachable(server.url, model="any")  # a server failing now: logged, and the turns will say
    url = server.url
    server.close()
    with pytest.raises(EndpointUnreachableError) as caught:
        check_reachable(url, timeout=2.0)
    assert str(caught.value).startswith(f"cannot reach the model server at {url} (ConnectError:")
    with pytest.raises(EndpointUnreachableError, match="missing an 'http://' or 'https://' protocol"):
        check_reachable("localhost:11434/v1")
    with pytest.raises(EndpointUnreachableError, match=r"\(not a valid URL: "):
        check_reachable("http://[::1/v1")


def stream_of(llm: OpenAICompatibleLLM, request: LlmRequest) -> list[tuple[float, StreamEvent]]:
    """Each event the adapter streamed, with the second it arrived at."""
    async def go() -> list[tuple[float, StreamEvent]]:
        return [(time.monotonic(), event) async for event in llm.stream(request)]
    return asyncio.run(go())


def test_streamed_text_arrives_as_the_server_sends_it(server: ScriptedServer) -> None:
    server.stream(streamed_completion("Hello there, Ada.", size=6, usage=(21, 4)), pause=0.15)
    timed = stream_of(OpenAICompatibleLLM(server.url, "m1"), HELLO)
    events = [event for _, event in timed]
    assert events[:-1] == [TextDelta("Hello "), TextDelta("there,"), TextDelta(" Ada."), Usage(21, 4)]
    assert events[-1] == Finished(LlmReply("Hello there, Ada.", (), "served-model", Usage(21, 4), "stop"))
    assert timed[-1][0] - timed[0][0] > 0.4  # the first words came before the last were sent
    body = server.requests[0]["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_streamed_tool_calls_are_assembled_by_index(server: ScriptedServer) -> None:
    server.stream(streamed_completion("Checking.", [("call_a", "weather", '{"city": "Oslo"}'), ("call_b", "clock", "")], size=5))
    reply = run(OpenAICompatibleLLM(server.url, "m1"), HELLO)
    assert reply == LlmReply(
        "Checking.", (ToolCall("call_a", "weather", {"city": "Oslo"}), ToolCall("call_b", "clock")),
        "served-model", Usage(12, 5), "tool_calls",
    )


def test_interleaved_argument_pieces_of_parallel_calls_go_to_their_own_call(server: ScriptedServer) -> None:
    opening = [{"index": i, "id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": ""}} for i in (0, 1)]
    server.stream([
        chunk({"role": "assistant", "content": None, "tool_calls": opening}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": '{"n": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"n": 0}'}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": "1}"}}]}),
        chunk(finish_reason="tool_calls"),
    ])
    events = [event for _, event in stream_of(OpenAICompatibleLLM(server.url, "m1"), HELLO)]
    assert events[2] == ToolCallDelta(1, None, None, '{"n": ')
    assert events[-1].reply.tool_calls == (ToolCall("c0", "f", {"n": 0}), ToolCall("c1", "f", {"n": 1}))  # type: ignore[union-attr]


def test_calls_a_server_streams_all_at_index_0_stay_apart_and_a_repeated_id_continues_its_call(server: ScriptedServer) -> None:
    def piece(call_id: str, arguments: str, name: str | None = "f") -> dict[str, Any]:
        return {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}

    server.stream([  # as Ollama sends a step's calls: each whole, each at index 0; vLLM repeats the id with each piece
        chunk({"role": "assistant", "content": "", "tool_calls": [piece("call_1", '{"n": 1}')]}),
        chunk({"tool_calls": [piece("call_2", '{"n": ')]}),
        chunk({"tool_calls": [piece("call_2", "2}", name=None)]}),
        chunk({"tool_calls": [piece("call_3", "{}", name="g")]}),
        chunk(finish_reason="tool_calls"),
    ])
    reply = run(OpenAICompatibleLLM(server.url, "m1"), HELLO)
    assert reply.tool_calls == (ToolCall("call_1", "f", {"n": 1}), ToolCall("call_2", "f", {"n": 2}), ToolCall("call_3", "g"))


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_content_as_a_list_of_parts_and_arguments_as_an_object_are_read(server: ScriptedServer, streamed: bool) -> None:
    parts = [{"type": "text", "text": "Sunny "}, {"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "today."}]
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "weather", "arguments": {"city": "Oslo"}}}
    if streamed:
        server.stream([chunk({"role": "assistant", "content": parts}), chunk({"tool_calls": [call]}), chunk(finish_reason="stop")])
    else:
        server.reply(body={"choices": [{"message": {"role": "assistant", "content": parts, "tool_calls": [call]}}]})
    reply = run(OpenAICompatibleLLM(server.url, "m"), HELLO)
    assert reply.content == "Sunny today." and reply.tool_calls == (ToolCall("c1", "weather", {"city": "Oslo"}),)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_refusal_is_the_answers_text(server: ScriptedServer, streamed: bool) -> None:
    if streamed:
        server.stream([chunk({"role": "assistant", "content": None, "refusal": ""}), chunk({"refusal": "I can't "}),
                       chunk({"refusal": "help with that."}), chunk(finish_reason="stop")])
    else:
        server.reply(body={"choices": [{"message": {"role": "assistant", "content": None, "refusal": "I can't help with that."}}]})
    assert run(OpenAICompatibleLLM(server.url, "m"), HELLO).content == "I can't help with that."


def test_sampling_settings_and_usage_pass_through(server: ScriptedServer) -> None:
    server.reply(body={**completion("ok"), "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}})
    request = LlmRequest(HELLO.messages, temperature=0.3, max_tokens=64, stop=("\n\n", "END"), seed=7)
    reply = run(OpenAICompatibleLLM(server.url, "m"), request)
    assert reply.usage == Usage(9, 1)
    body = server.requests[0]["body"]
    assert (body["temperature"], body["max_tokens"], body["stop"], body["seed"]) == (0.3, 64, ["\n\n", "END"], 7)
    server.reply(body=completion("ok"))
    run(OpenAICompatibleLLM(server.url, "m"), HELLO)
    assert not {"temperature", "max_tokens", "stop", "seed"} & set(server.requests[1]["body"])


def test_a_stream_cut_off_midway_is_an_error_after_the_text_so_far(server: ScriptedServer) -> None:
    server.stream(streamed_completion("Half an answ", usage=None)[:-1], done=False)
    seen: list[StreamEvent] = []

    async def go() -> None:
        async for event in OpenAICompatibleLLM(server.url, "m").stream(HELLO):
            seen.append(event)

    with pytest.raises(LlmCallError, match="stream ended before the answer was finished") as caught:
        asyncio.run(go())
    assert caught.value.kind is FailureKind.UNKNOWN and "".join(e.text for e in seen if isinstance(e, TextDelta)) == "Half an answ"
    assert not any(isinstance(e, Finished) for e in seen) and len(server.requests) == 1
    assert caught.value.retryable, "a new call could succeed, as after any stream cut off"
    server.stream(streamed_completion("Half an answ", usage=None)[:-1], done=False)
    with pytest.raises(LlmCallError) as completed:
        run(OpenAICompatibleLLM(server.url, "m"), HELLO)
    assert completed.value.partial_text == "Half an answ"


def test_an_error_the_server_streams_is_one_line(server: ScriptedServer) -> None:
    server.stream([chunk({"content": "Hel"}), {"error": {"message": "upstream\nconnection   reset", "code": 502}}], done=False)
    with pytest.raises(LlmCallError) as caught:
        run(OpenAICompatibleLLM(server.url, "m"), HELLO)
    assert str(caught.value) == "the model server failed mid-answer: upstream connection reset"


@pytest.mark.parametrize(
    ("status", "raw", "said"),
    [(404, b"<html><head><title>404 Not Found</title></head><body>" + b"<p>lost</p>" * 500 + b"</body></html>", "404 Not Found"),
     (500, b'{"error": {"message": "model crashed: CUDA out of memory", "type": "server_error"}}', "model crashed: CUDA out of memory")],
)
def test_the_servers_explanation_is_surfaced_in_one_line(server: ScriptedServer, status: int, raw: bytes, said: str) -> None:
    for _ in range(3):
        server.reply(status, raw=raw)
    with pytest.raises(LlmCallError) as caught:
        run(OpenAICompatibleLLM(server.url, "m", sleep=SleepLog()), HELLO)
    message = str(caught.value)
    assert said in message and "\n" not in message and "<" not in message and len(message) < 200


def test_a_rate_limit_outlasting_the_turn_deadline_ends_the_turn_at_once(server: ScriptedServer, tmp_path: Path) -> None:
    """The adapter slept the server's Retry-After (up to 30 s) while the turn's deadline ran out."""
    server.reply(429, {"error": {"message": "Rate limit reached for requests"}}, headers={"Retry-After": "20"})
    channel = RecordingChannel()
    llm = OpenAICompatibleLLM(server.url, "m")
    with standard_pipeline(llm, channel, data_dir=tmp_path) as pipeline:
        started = time.monotonic()
        ctx = pipeline.build(turn_timeout=5.0).run_turn_sync(Session("s"), IncomingMessage("hi"))
    assert time.monotonic() - started < 2.5 and len(server.requests) == 1
    assert ctx.require(TurnOutcome).fallback and len(channel.texts) == 1
    (failure,) = ctx.failures
    assert failure.kind is FailureKind.RATE_LIMIT and "next attempt would start after the caller's deadline" in failure.message


def test_run_turn_sync_twice_on_one_adapter(server: ScriptedServer, tmp_path: Path) -> None:
    """The adapter's httpx client stayed bound to the first turn's event loop: the second
    turn failed with 'Event loop is closed'."""
    server.stream(streamed_completion("First answer."))
    server.reply(body=completion("Second answer."))
    server.stream(streamed_completion("Third answer."))
    channel = RecordingChannel()
    with standard_pipeline(OpenAICompatibleLLM(server.url, "m"), channel, data_dir=tmp_path) as pipeline:
        loop = pipeline.build()
        turns = [loop.run_turn_sync(Session("s"), IncomingMessage(text)) for text in ("one", "two", "three")]
    assert [ctx.failures for ctx in turns] == [(), (), ()]
    assert channel.texts == ["First answer.", "Second answer.", "Third answer."]


@pytest.mark.parametrize("status", [401, 403])
def test_the_check_says_the_server_refused_the_key_and_sends_it_as_a_bearer_token(server: ScriptedServer, status: int) -> None:
    server.models_status = status
    with pytest.raises(ApiKeyRefusedError) as caught:
        OpenAICompatibleLLM(server.url, "gpt-4o", api_key="sk-wrong").check()
    assert str(caught.value) == f"the model server refused the API key (GET {server.url}/models answered HTTP {status})"
    assert [(get["path"], get["auth"]) for get in server.gets] == [("/v1/models", "Bearer sk-wrong")] and server.requests == []


def test_the_check_says_a_base_url_without_its_api_path_has_no_such_path(server: ScriptedServer) -> None:
    base = server.url.removesuffix("/v1")
    with pytest.raises(ApiPathError) as caught:
        check_reachable(base, model="gpt-4o")
    assert str(caught.value) == f"no such API path; the base URL usually ends in /v1 (GET {base}/models answered HTTP 404)"


def test_the_check_finds_a_model_the_server_does_not_serve(server: ScriptedServer) -> None:
    check_reachable(server.url, model="gpt-4o")  # a listing of another shape: taken at its word
    server.models = ["gpt-4o-mini", "llama3.2:latest"]
    check_reachable(server.url, model="gpt-4o-mini")
    check_reachable(server.url, model="llama3.2")  # Ollama's tag default
    with pytest.raises(UnknownModelError) as caught:
        check_reachable(server.url, model="gpt-4o")
    assert str(caught.value) == (
        f"the model server at {server.url} does not serve a model named 'gpt-4o' "
        "(it serves: gpt-4o-mini, llama3.2:latest); pass one of those as the model name"
    )


ROOT = Path(__file__).resolve().parents[4]
SCRIPTED_MODEL = 'llm = ScriptedLLM(["Hello, how can I help?", "It is noon."])\n'


def tutorial_step_3_on_a_model_server() -> str:
    """The tutorial's step-3 script with `OpenAICompatibleLLM` at $BASE_URL in place of the
    scripted model, and two more turns before it closes the pipeline."""
    step = (ROOT / "docs" / "tutorial.md").read_text().split("## 3.", 1)[1].split("## 4.", 1)[0]
    script = step.split("```python\n", 1)[1].split("```", 1)[0]
    assert SCRIPTED_MODEL in script and "pipeline.close()" in script, "the tutorial's step 3 changed: update this test"
    script = script.replace(SCRIPTED_MODEL, 'import os\nfrom agentloop.adapters.llm.openai import OpenAICompatibleLLM\n'
                            'llm = OpenAICompatibleLLM(os.environ["BASE_URL"], "any-model")\n')
    more = ('third = loop.run_turn_sync(session, IncomingMessage("Thanks"))\n'
            'fourth = loop.run_turn_sync(session, IncomingMessage("Bye"))\n'
            'assert channel.texts[2:] == ["You are welcome.", "Goodbye."] and third.failures == fourth.failures == ()\n')
    return script.replace("pipeline.close()", more + "pipeline.close()\nprint('four turns answered')")


def test_the_tutorials_step_3_runs_twice_in_a_row_on_a_model_server(server: ScriptedServer, tmp_path: Path) -> None:
    """The tutorial's own pattern, run_turn_sync with OpenAICompatibleLLM, failed on its second
    turn with 'Event loop is closed'."""
    script = tmp_path / "step3.py"
    script.write_text(tutorial_step_3_on_a_model_server())
    (tmp_path / "welcome_bot.py").write_text((ROOT / "tests" / "example_project" / "welcome_bot.py").read_text())
    env = {**os.environ, "BASE_URL": server.url, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    for run_number in (1, 2):
        server.stream(streamed_completion("Hello, how can I help?"))
        server.reply(body=completion("It is noon."))
        server.stream(streamed_completion("You are welcome."))
        server.stream(streamed_completion("Goodbye."))
        workdir = tmp_path / f"run{run_number}"
        workdir.mkdir()
        result = subprocess.run([sys.executable, str(script)], cwd=workdir, env=env, capture_output=True, text=True, timeout=120)
        assert (result.returncode, result.stderr) == (0, ""), result.stderr
        assert result.stdout.rstrip().endswith("four turns answered")
    assert len(server.requests) == 8


def test_the_requests_cache_key_is_sent_as_prompt_cache_key_unless_switched_off(server: ScriptedServer) -> None:
    for _ in range(3):
        server.stream(streamed_completion("ok"))
    keyed = LlmRequest((ChatMessage.user("hi"),), cache_key="a1b2")
    asyncio.run(OpenAICompatibleLLM(server.url, "m").complete(keyed))
    asyncio.run(OpenAICompatibleLLM(server.url, "m").complete(LlmRequest((ChatMessage.user("hi"),))))
    asyncio.run(OpenAICompatibleLLM(server.url, "m", send_cache_key=False).complete(keyed))
    assert [sent["body"].get("prompt_cache_key") for sent in server.requests] == ["a1b2", None, None]


@pytest.mark.parametrize("streamed", [True, False])
def test_cached_prompt_tokens_are_read_from_prompt_tokens_details(server: ScriptedServer, streamed: bool) -> None:
    """`prompt_tokens` counts the whole prompt; `prompt_tokens_details.cached_tokens` the part read from the cache."""
    if streamed:
        server.stream(streamed_completion("ok", usage=(2006, 300, 1920)))
    else:
        server.reply(body={**completion("ok"), "usage": usage_body(2006, 300, 1920)})
    reply = asyncio.run(OpenAICompatibleLLM(server.url, "m").complete(LlmRequest((ChatMessage.user("hi"),))))
    assert reply.usage == Usage(2006, 300, cache_read_tokens=1920)


@pytest.mark.parametrize(("field", "server_kind"), [("max_model_len", "vLLM"), ("context_length", "OpenRouter"),
                                                   ("loaded_context_length", "LM Studio")])
def test_the_check_reads_the_context_window_the_listing_gives(server: ScriptedServer, field: str, server_kind: str) -> None:
    """A model's entry in the listing that gives its window (as `server_kind` does) is what the check answers;
    an entry without one, or with one that is not a positive whole number, answers None."""
    server.models = ["qwen", "gpt-4o", "odd"]
    server.model_fields = {"qwen": {field: 8192}, "odd": {field: "8k"}}
    assert check_reachable(server.url, model="qwen") == 8192
    assert check_reachable(server.url, model="gpt-4o") is None
    assert check_reachable(server.url, model="odd") is None
    checked = OpenAICompatibleLLM(server.url, "qwen")
    checked.check()
    given = OpenAICompatibleLLM(server.url, "qwen", context_window=4096)
    given.check()
    assert (checked.context_window, given.context_window) == (8192, 4096)


def test_lm_studios_window_is_the_one_the_loaded_model_serves_not_the_most_it_could_take(server: ScriptedServer) -> None:
    """LM Studio lists `max_context_length` (what the model could be loaded with) beside
    `loaded_context_length` (what it serves): a prompt budgeted by the first would be refused."""
    server.models = ["qwen", "bare"]
    server.model_fields = {"qwen": {"max_context_length": 131_072, "loaded_context_length": 4096},
                           "bare": {"max_context_length": 131_072}}
    assert check_reachable(server.url, model="qwen") == 4096
    assert check_reachable(server.url, model="bare") is None
