"""AnthropicLLM against a real HTTP server on 127.0.0.1 speaking the Messages API's wire format."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop import (
    ChatMessage, FailureKind, IncomingMessage, LlmCallError, LlmRequest, Session, ToolCall, ToolSpec, knowledge_scope, tool,
)
from agentloop.adapters.llm.anthropic import ANTHROPIC_VERSION, AnthropicLLM, CacheBreakpoint, PromptCaching, check_reachable
from agentloop.adapters.llm.http import RetryPolicy
from agentloop.errors import ApiKeyRefusedError, EndpointUnreachableError, UnknownModelError
from agentloop.messages import Finished, StreamEvent, TextDelta, ToolCallDelta, Usage
from agentloop.testing import RecordingChannel
from agentloop.testing.anthropic_server import api_error, message_body, message_events, queue_stream
from agentloop.testing.http import ScriptedServer
from systems import RagIndexingSystem, standard_pipeline


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as scripted:
        yield scripted


HELLO = LlmRequest((ChatMessage.system("be brief"), ChatMessage.user("hi")))


def complete(llm: AnthropicLLM, request: LlmRequest = HELLO) -> Any:
    return asyncio.run(llm.complete(request))


def stream(llm: AnthropicLLM, request: LlmRequest = HELLO) -> list[StreamEvent]:
    async def go() -> list[StreamEvent]:
        return [event async for event in llm.stream(request)]

    return asyncio.run(go())


def test_streamed_text_arrives_in_deltas_and_the_reply_has_usage_and_stop_reason(server: ScriptedServer) -> None:
    queue_stream(server, message_events("Hello there, user.", input_tokens=12, output_tokens=7, chunk=5))
    events = stream(AnthropicLLM(server.url, "claude-test", api_key="sk-ant"))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hello", " ther", "e, us", "er."]
    assert Usage(12, 7) in events
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert finished.reply.content == "Hello there, user." and finished.reply.usage == Usage(12, 7)
    assert (finished.reply.model, finished.reply.stop_reason) == ("served-claude", "end_turn")


def test_text_arrives_as_the_server_sends_it_not_when_the_stream_ends(server: ScriptedServer) -> None:
    events = message_events("one two three four five", chunk=4)
    queue_stream(server, events, pause=0.05)
    arrived: list[tuple[StreamEvent, float]] = []

    async def go() -> None:
        async for event in AnthropicLLM(server.url, "m").stream(HELLO):
            arrived.append((event, time.monotonic()))

    asyncio.run(go())
    first_text = next(at for event, at in arrived if isinstance(event, TextDelta))
    sent_after_it = len(events) - 4  # message_start, ping, content_block_start and the first delta came before
    assert arrived[-1][1] - first_text >= 0.8 * 0.05 * sent_after_it


def test_request_shape_headers_and_settings(server: ScriptedServer) -> None:
    queue_stream(server, message_events("ok"))
    request = LlmRequest(HELLO.messages, temperature=0.3, max_tokens=50, stop=("END",), seed=7)
    complete(AnthropicLLM(server.url, "claude-test", api_key="sk-ant", caching=PromptCaching(())), request)
    sent, headers = server.requests[0], server.headers[0]
    assert sent["path"] == "/v1/messages"
    assert headers["x-api-key"] == "sk-ant" and headers["anthropic-version"] == ANTHROPIC_VERSION
    assert sent["body"] == {
        "model": "claude-test", "max_tokens": 50, "stream": True, "system": "be brief", "temperature": 0.3,
        "stop_sequences": ["END"], "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }


def test_max_tokens_defaults_because_the_api_requires_it(server: ScriptedServer) -> None:
    queue_stream(server, message_events("ok"))
    queue_stream(server, message_events("ok"))
    complete(AnthropicLLM(server.url, "m"))
    complete(AnthropicLLM(server.url, "m", max_tokens=300))
    assert [r["body"]["max_tokens"] for r in server.requests] == [4096, 300]
    with pytest.raises(ValueError, match="max_tokens must be at least 1"):
        AnthropicLLM(server.url, "m", max_tokens=0)


def test_streamed_tool_calls_are_put_together_from_their_json_fragments(server: ScriptedServer) -> None:
    queue_stream(server, message_events("Let me look.", [("toolu_1", "weather", {"city": "Oslo", "days": 3}),
                                                         ("toolu_2", "clock", {})], chunk=3))
    events = stream(AnthropicLLM(server.url, "m"))
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert (deltas[0].index, deltas[0].id, deltas[0].name) == (0, "toolu_1", "weather")
    assert len([d for d in deltas if d.index == 0 and d.arguments_fragment]) > 1
    reply = events[-1].reply  # type: ignore[union-attr]
    assert reply.content == "Let me look." and reply.stop_reason == "tool_use"
    assert reply.tool_calls == (ToolCall("toolu_1", "weather", {"city": "Oslo", "days": 3}), ToolCall("toolu_2", "clock", {}))


def test_tool_use_and_tool_results_go_as_content_blocks_with_one_steps_results_in_one_user_message(
    server: ScriptedServer,
) -> None:
    queue_stream(server, message_events("Sunny, noon."))
    spec = ToolSpec("weather", "the forecast", {"type": "object", "properties": {"city": {"type": "string"}}})
    calls = (ToolCall("t1", "weather", {"city": "Oslo"}), ToolCall("t2", "clock", {}))
    request = LlmRequest((ChatMessage.system("be brief"), ChatMessage.user("weather and time?"),
                          ChatMessage.assistant("Checking.", calls), ChatMessage.tool("t1", "weather", "sunny"),
                          ChatMessage.tool("t2", "clock", "noon")), tools=(spec,))
    assert complete(AnthropicLLM(server.url, "m", caching=PromptCaching(())), request).content == "Sunny, noon."
    body = server.requests[0]["body"]
    assert body["tools"] == [{"name": "weather", "description": "the forecast", "input_schema": spec.parameters}]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "weather and time?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                                          {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}},
                                          {"type": "tool_use", "id": "t2", "name": "clock", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"},
                                     {"type": "tool_result", "tool_use_id": "t2", "content": "noon"}]},
    ]


def test_whitespace_a_model_wrote_before_its_tool_call_is_not_sent_back_as_a_text_block(server: ScriptedServer) -> None:
    queue_stream(server, message_events("Sunny."))
    request = LlmRequest((ChatMessage.user("weather?"), ChatMessage.assistant("\n\n", (ToolCall("t1", "weather", {}),)),
                          ChatMessage.tool("t1", "weather", "sunny")))
    complete(AnthropicLLM(server.url, "m"), request)
    assert server.requests[0]["body"]["messages"][1] == {
        "role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "weather", "input": {}}]}


def test_input_tokens_include_those_written_to_and_read_from_the_prompt_cache(server: ScriptedServer) -> None:
    queue_stream(server, message_events("Hi.", input_tokens=7, output_tokens=3, cache_write_tokens=20, cache_read_tokens=100))
    assert complete(AnthropicLLM(server.url, "m")).usage == Usage(127, 3, cache_read_tokens=100, cache_write_tokens=20)


class SleepLog:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def test_overloaded_529_and_rate_limited_429_are_retried(server: ScriptedServer) -> None:
    server.reply(529, api_error("overloaded_error", "Overloaded"))
    server.reply(429, api_error("rate_limit_error", "Number of requests has exceeded your rate limit"),
                 headers={"retry-after": "3"})
    queue_stream(server, message_events("at last"))
    sleep = SleepLog()
    llm = AnthropicLLM(server.url, "m", retry=RetryPolicy(max_retries=2, backoff=0.5), sleep=sleep)
    assert complete(llm).content == "at last"
    assert sleep.delays == [0.5, 3.0] and len(server.requests) == 3


def test_overloaded_to_the_last_retry_says_so_in_one_line(server: ScriptedServer) -> None:
    for _ in range(2):
        server.reply(529, api_error("overloaded_error", "Overloaded"))
    with pytest.raises(LlmCallError) as caught:
        complete(AnthropicLLM(server.url, "m", retry=RetryPolicy(max_retries=1), sleep=SleepLog()))
    assert str(caught.value) == "the model server failed (HTTP 529): Overloaded"
    assert caught.value.retryable and len(server.requests) == 2


def test_no_retry_wait_starts_past_the_callers_deadline(server: ScriptedServer) -> None:
    server.reply(529, api_error("overloaded_error", "Overloaded"), headers={"retry-after": "20"})
    sleep = SleepLog()
    with pytest.raises(LlmCallError, match="caller's deadline"):
        complete(AnthropicLLM(server.url, "m", sleep=sleep), LlmRequest(HELLO.messages, time_left=5.0))
    assert sleep.delays == [] and len(server.requests) == 1


def test_a_400_surfaces_the_apis_error_in_one_line_without_retry(server: ScriptedServer) -> None:
    server.reply(400, api_error("invalid_request_error", "messages: roles must alternate\nbetween user and assistant"))
    with pytest.raises(LlmCallError) as caught:
        complete(AnthropicLLM(server.url, "m"))
    said = str(caught.value)
    assert "(HTTP 400" in said and said.endswith("): messages: roles must alternate between user and assistant")
    assert caught.value.kind is FailureKind.VALIDATION and not caught.value.retryable and len(server.requests) == 1


def test_an_error_event_mid_stream_is_an_llm_call_error_after_the_text_so_far(server: ScriptedServer) -> None:
    events = message_events("Half an answer that never ends")
    queue_stream(server, events[:6] + [api_error("overloaded_error", "Overloaded")])
    seen: list[StreamEvent] = []

    async def go() -> None:
        async for event in AnthropicLLM(server.url, "m").stream(HELLO):
            seen.append(event)

    with pytest.raises(LlmCallError) as caught:
        asyncio.run(go())
    assert str(caught.value) == "the Anthropic API stopped the answer midway (overloaded_error: Overloaded)"
    assert caught.value.retryable and seen == [TextDelta("Half"), TextDelta(" an "), TextDelta("answ")]
    assert len(server.requests) == 1  # text already shown is not asked for again


def test_a_stream_cut_off_before_message_stop_is_an_error_not_a_short_answer(server: ScriptedServer) -> None:
    queue_stream(server, message_events("Half an answer")[:-2])
    with pytest.raises(LlmCallError, match="cut off before message_stop") as caught:
        complete(AnthropicLLM(server.url, "m"))
    assert caught.value.retryable and caught.value.partial_text == "Half an answer"


@pytest.mark.parametrize(
    "bad",
    ["{oops", {"type": "content_block_delta", "index": 7, "delta": {"type": "input_json_delta", "partial_json": "{"}},
     {"type": "content_block_start", "index": 0}],
    ids=["not JSON", "a delta of a block never started", "a start without its block"],
)
def test_a_malformed_event_is_a_validation_error_that_quotes_it(server: ScriptedServer, bad: Any) -> None:
    queue_stream(server, [*message_events("x")[:2], bad])
    with pytest.raises(LlmCallError, match="malformed stream event") as caught:
        complete(AnthropicLLM(server.url, "m"))
    assert caught.value.kind is FailureKind.VALIDATION and "\n" not in str(caught.value)


def test_thinking_blocks_are_skipped_and_a_tool_input_sent_whole_at_its_start_is_read(server: ScriptedServer) -> None:
    events = message_events("Done.")
    thinking = [
        {"type": "content_block_start", "index": 1, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "thinking_delta", "thinking": "hmm"}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "signature_delta", "signature": "sig"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2,
         "content_block": {"type": "tool_use", "id": "t1", "name": "clock", "input": {"zone": "UTC"}}},
        {"type": "content_block_stop", "index": 2},
    ]
    queue_stream(server, events[:-2] + thinking + events[-2:])
    reply = complete(AnthropicLLM(server.url, "m"))
    assert reply.content == "Done." and reply.tool_calls == (ToolCall("t1", "clock", {"zone": "UTC"}),)


def test_two_asyncio_runs_in_a_row_on_one_adapter(server: ScriptedServer) -> None:
    """A client bound to the first event loop failed the second run with 'Event loop is closed'."""
    llm = AnthropicLLM(server.url, "m")
    queue_stream(server, message_events("one"))
    queue_stream(server, message_events("two"))
    assert [complete(llm).content, complete(llm).content] == ["one", "two"]


def test_the_start_up_check_says_the_api_refused_the_key_sent_as_x_api_key(server: ScriptedServer) -> None:
    server.models_status = 401
    with pytest.raises(ApiKeyRefusedError, match="^the model server refused the API key "):
        AnthropicLLM(server.url, "claude-sonnet-4-5", api_key="sk-ant-wrong").check()
    assert [(get["path"], get["headers"]["x-api-key"]) for get in server.gets] == [("/v1/models", "sk-ant-wrong")]


def test_the_start_up_check_finds_a_model_the_api_does_not_list(server: ScriptedServer) -> None:
    check_reachable(server.url, model="claude-typo", api_key="sk-ant")  # a listing of another shape: taken at its word
    server.models = ["claude-sonnet-4-5", "claude-haiku-4-5"]
    check_reachable(server.url, model="claude-sonnet-4-5", api_key="sk-ant")
    with pytest.raises(UnknownModelError, match="does not serve a model named 'claude-sonet-4-5' .*claude-haiku-4-5"):
        check_reachable(server.url, model="claude-sonet-4-5", api_key="sk-ant")
    url = server.url
    server.close()
    with pytest.raises(EndpointUnreachableError):
        check_reachable(url, model="claude-sonnet-4-5", timeout=2.0)


def test_a_model_missing_from_the_first_page_of_a_longer_listing_is_not_called_unknown(server: ScriptedServer) -> None:
    """The Models API lists 20 models a page (`has_more` says more follow): a model not on the first
    page may well exist, so the check is inconclusive there rather than refusing the model."""
    server.models = ["claude-sonnet-4-5", "claude-haiku-4-5"]
    server.listing_fields = {"has_more": True, "last_id": "claude-haiku-4-5"}
    assert check_reachable(server.url, model="claude-opus-4-1", api_key="sk-ant") is None
    server.listing_fields = {"has_more": False}
    with pytest.raises(UnknownModelError):
        check_reachable(server.url, model="claude-opus-4-1", api_key="sk-ant")


def test_the_start_up_check_reads_the_models_max_input_tokens_as_its_window(server: ScriptedServer) -> None:
    """The Models API's entry of a model gives `max_input_tokens` (and `max_tokens`, the answer's limit): its window."""
    server.models = ["claude-sonnet-4-5", "claude-haiku-4-5"]
    server.model_fields = {
        "claude-sonnet-4-5": {"type": "model", "display_name": "Claude Sonnet 4.5", "max_input_tokens": 200_000, "max_tokens": 64_000},
    }
    assert check_reachable(server.url, model="claude-sonnet-4-5", api_key="sk-ant") == 200_000
    assert check_reachable(server.url, model="claude-haiku-4-5", api_key="sk-ant") is None
    llm = AnthropicLLM(server.url, "claude-sonnet-4-5", api_key="sk-ant")
    llm.check()
    assert llm.context_window == 200_000


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny"


def test_a_standard_turn_with_a_streamed_tool_call_over_http(server: ScriptedServer, tmp_path: Path) -> None:
    queue_stream(server, message_events(None, [("toolu_1", "weather", {"city": "Oslo"})]))
    queue_stream(server, message_events("Oslo is sunny."))
    channel = RecordingChannel()

    async def turn() -> None:
        llm = AnthropicLLM(server.url, "m")
        with standard_pipeline(llm, channel, data_dir=tmp_path, tools=[weather]) as pipeline:
            await pipeline.build().run_turn(Session("s", user_id="u"), IncomingMessage("Weather in Oslo?"))

    asyncio.run(turn())
    assert channel.texts == ["Oslo is sunny."]
    second = server.requests[1]["body"]["messages"]
    assert second[-2] == {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "weather",
                                                            "input": {"city": "Oslo"}}]}
    assert second[-1] == {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                       "content": "Oslo: sunny"}]}


arguments = st.dictionaries(st.text(min_size=1, max_size=8), st.one_of(st.integers(), st.text(max_size=12), st.booleans()), max_size=3)


@given(
    text=st.one_of(st.none(), st.text(min_size=1, max_size=40)),
    calls=st.lists(arguments, max_size=2),
    chunk=st.integers(min_value=1, max_value=9),
    cut=st.data(),
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_i14_what_streams_is_the_reply_and_a_cut_stream_is_never_an_answer(
    server: ScriptedServer, text: str | None, calls: list[dict[str, Any]], chunk: int, cut: st.DataObject
) -> None:
    """I14 at the adapter: the streamed deltas add up to exactly the reply (text and each tool
    call's input, however the API split them), and a stream cut anywhere before message_stop
    is an `LlmCallError`, never a shorter answer."""
    uses = [(f"toolu_{n}", f"tool_{n}", call) for n, call in enumerate(calls)]
    events = message_events(text, uses, chunk=chunk)
    llm = AnthropicLLM(server.url, "m", retry=RetryPolicy(max_retries=0))
    queue_stream(server, events)
    streamed = stream(llm)
    reply = streamed[-1].reply  # type: ignore[union-attr]
    assert "".join(e.text for e in streamed if isinstance(e, TextDelta)) == (text or "") == (reply.content or "")
    assert reply.tool_calls == tuple(ToolCall(*use) for use in uses)
    pieces = [e for e in streamed if isinstance(e, ToolCallDelta)]
    assert all("".join(p.arguments_fragment for p in pieces if p.index == n) == json.dumps(call) for n, call in enumerate(calls))

    queue_stream(server, events[: cut.draw(st.integers(min_value=0, max_value=len(events) - 1), label="cut after")])
    with pytest.raises(LlmCallError):
        complete(llm)


def _cache_marks(body: Any) -> int:
    """How many `cache_control` breakpoints a request body carries, wherever they are."""
    return json.dumps(body).count('"cache_control"')


CONVERSATION = (
    ChatMessage.system("be brief"), ChatMessage.user("earlier question"), ChatMessage.assistant("earlier answer"),
    ChatMessage.user("the current question"),
)
TOOLS = (ToolSpec("weather", "the weather", {"type": "object", "properties": {}}), ToolSpec("time", "the time"))


def test_cache_breakpoints_go_on_the_system_prompt_the_last_tool_and_the_history_before_the_current_message(
    server: ScriptedServer,
) -> None:
    queue_stream(server, message_events("ok"))
    complete(AnthropicLLM(server.url, "m"), LlmRequest(CONVERSATION, TOOLS))
    body = server.requests[0]["body"]
    ephemeral = {"type": "ephemeral"}
    assert body["system"] == [{"type": "text", "text": "be brief", "cache_control": ephemeral}]
    assert "cache_control" not in body["tools"][0] and body["tools"][1]["cache_control"] == ephemeral
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "earlier question"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "earlier answer", "cache_control": ephemeral}]},
        {"role": "user", "content": [{"type": "text", "text": "the current question"}]},
    ]
    assert _cache_marks(body) == 3


def test_the_history_breakpoint_stays_before_the_current_message_through_a_tool_step_and_all_four_fit_the_limit(
    server: ScriptedServer,
) -> None:
    """In the tool loop's second call the prompt grows after the current message; the history
    prefix is still the one marked, and the last message is marked only when asked (four at most)."""
    step = (ChatMessage.assistant(None, (ToolCall("t1", "weather", {}),)), ChatMessage.tool("t1", "weather", "sunny"))
    queue_stream(server, message_events("ok"))
    queue_stream(server, message_events("ok"))
    complete(AnthropicLLM(server.url, "m"), LlmRequest(CONVERSATION + step, TOOLS))
    everything = PromptCaching(tuple(CacheBreakpoint))
    complete(AnthropicLLM(server.url, "m", caching=everything), LlmRequest(CONVERSATION + step, TOOLS))
    default, all_four = (sent["body"] for sent in server.requests)
    assert [_cache_marks(turn) for turn in default["messages"]] == [0, 1, 0, 0, 0]
    assert _cache_marks(default) == 3
    assert [_cache_marks(turn) for turn in all_four["messages"]] == [0, 1, 0, 0, 1]
    assert all_four["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert _cache_marks(all_four) == 4


def test_a_first_message_without_tools_marks_only_the_system_prompt_and_no_caching_marks_nothing(server: ScriptedServer) -> None:
    queue_stream(server, message_events("ok"))
    queue_stream(server, message_events("ok"))
    complete(AnthropicLLM(server.url, "m"))
    complete(AnthropicLLM(server.url, "m", caching=PromptCaching(())), LlmRequest(CONVERSATION, TOOLS))
    first, uncached = (sent["body"] for sent in server.requests)
    assert _cache_marks(first) == 1 and first["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert _cache_marks(uncached) == 0 and uncached["system"] == "be brief"


def test_a_breakpoint_named_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="once"):
        PromptCaching((CacheBreakpoint.SYSTEM, CacheBreakpoint.SYSTEM))


def test_usage_repeated_cumulatively_in_message_delta_is_counted_once(server: ScriptedServer) -> None:
    """The API may send the input counts again in `message_delta`, cumulative as the output count is."""
    events = message_events("Hi.", input_tokens=7, output_tokens=3, cache_read_tokens=100, cache_write_tokens=20)
    events[-2]["usage"] = {"input_tokens": 7, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 100, "output_tokens": 3}
    queue_stream(server, events)
    assert complete(AnthropicLLM(server.url, "m")).usage == Usage(127, 3, cache_read_tokens=100, cache_write_tokens=20)


def test_a_whole_message_reply_is_read_with_its_usage_and_cache_counts(server: ScriptedServer) -> None:
    server.reply(body=message_body("Hello.", input_tokens=5, output_tokens=2, cache_read_tokens=40, cache_write_tokens=8))
    reply = complete(AnthropicLLM(server.url, "m"))
    assert (reply.content, reply.stop_reason, reply.model) == ("Hello.", "end_turn", "served-claude")
    assert reply.usage == Usage(53, 2, cache_read_tokens=40, cache_write_tokens=8)


def _breakpoint(messages: list[dict[str, Any]]) -> int | None:
    """The index of the message whose last block carries the history's `cache_control`, if one does."""
    marked = [i for i, m in enumerate(messages) if any("cache_control" in block for block in m["content"])]
    return marked[-1] if marked else None


def test_two_turns_with_the_same_retrieval_repeat_the_prompt_prefix_so_the_cache_can_read_it(
    server: ScriptedServer, tmp_path: Path
) -> None:
    """Prompt caching can work: the second turn's system prompt and tools are byte for byte the first's,
    its messages extend the first's, and the history breakpoint moves forward past the first turn's answer."""
    for answer in ("It is sunny in Oslo.", "It rains in Bergen."):
        queue_stream(server, message_events(answer))
    session = Session("s", user_id="u")
    with standard_pipeline(AnthropicLLM(server.url, "m"), RecordingChannel(), data_dir=tmp_path, tools=[weather],
                           system_prompt="You answer questions about the weather.") as pipeline:
        pipeline.remove(RagIndexingSystem)  # no answer is indexed: both turns retrieve the one seeded text
        assert pipeline.stores is not None
        asyncio.run(pipeline.stores.rag.add(knowledge_scope(session), "Norway's weather changes by the hour."))
        loop = pipeline.build()
        for question in ("What is the weather in Oslo?", "And the weather in Bergen?"):
            loop.run_turn_sync(session, IncomingMessage(question))
    first, second = (request["body"] for request in server.requests)
    assert "Norway's weather changes by the hour." in first["system"][0]["text"]
    assert json.dumps(second["system"]).encode() == json.dumps(first["system"]).encode()
    assert json.dumps(second["tools"]).encode() == json.dumps(first["tools"]).encode()
    plain = [{**m, "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]]} for m in second["messages"]]
    assert plain[: len(first["messages"])] == first["messages"]
    assert plain[len(first["messages"])] == {"role": "assistant", "content": [{"type": "text", "text": "It is sunny in Oslo."}]}
    assert (_breakpoint(first["messages"]), _breakpoint(second["messages"])) == (None, len(first["messages"]))
