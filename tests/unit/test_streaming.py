"""agentloop.streaming: a reply as a stream, a stream as a reply, and any model streamed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from agentloop import Finished, LlmReply, LlmRequest, TextDelta, ToolCall, ToolCallDelta, Usage
from agentloop.errors import LlmCallError
from agentloop.outcome import FailureKind
from agentloop.ports import LLM, StreamingLLM
from agentloop.streaming import ReplyBuilder, collect, events_of, reply_events
from agentloop.testing import ScriptedLLM

REQUEST = LlmRequest(())
REPLY = LlmReply("Let me look.", (ToolCall("c1", "search", {"q": "x"}),), "m", Usage(12, 5), "tool_calls")


class WholeModel:
    async def complete(self, request: LlmRequest) -> LlmReply:
        return REPLY


class StreamingModel(WholeModel):
    async def stream(self, request: LlmRequest) -> AsyncIterator[TextDelta | ToolCallDelta | Usage | Finished]:
        for event in (TextDelta("Let "), TextDelta("me look."), Finished(REPLY)):
            yield event


async def _all(llm: LLM) -> list[object]:
    return [event async for event in events_of(llm, REQUEST)]


def test_a_model_that_cannot_stream_streams_its_whole_reply_part_by_part() -> None:
    assert not isinstance(WholeModel(), StreamingLLM)
    assert asyncio.run(_all(WholeModel())) == [
        TextDelta("Let me look."), ToolCallDelta(0, "c1", "search", '{"q": "x"}'), Usage(12, 5), Finished(REPLY),
    ]


def test_a_model_whose_stream_is_a_setting_not_a_method_is_streamed_from_its_complete() -> None:
    model = WholeModel()
    model.stream = False  # type: ignore[attr-defined]
    assert asyncio.run(collect(events_of(model, REQUEST))) == REPLY


def test_a_streaming_model_is_streamed_as_it_writes_and_collects_to_its_reply() -> None:
    assert isinstance(StreamingModel(), StreamingLLM)
    assert asyncio.run(_all(StreamingModel()))[:2] == [TextDelta("Let "), TextDelta("me look.")]
    assert asyncio.run(collect(events_of(StreamingModel(), REQUEST))) == REPLY


def test_a_stream_that_ends_without_finishing_is_a_retryable_model_error() -> None:
    async def cut() -> AsyncIterator[TextDelta]:
        yield TextDelta("Let")

    with pytest.raises(LlmCallError, match="ended before it finished") as caught:
        asyncio.run(collect(cut()))
    assert caught.value.retryable and caught.value.kind is FailureKind.UNKNOWN and caught.value.partial_text == "Let"


def test_a_model_error_that_breaks_the_stream_carries_the_text_streamed_before_it() -> None:
    broken = LlmCallError("the connection closed", kind=FailureKind.UNKNOWN)
    llm = ScriptedLLM([ScriptedLLM.cut("Oslo is sunny today", 3, broken), ScriptedLLM.cut("Rain", 1, broken)], chunk=5)
    with pytest.raises(LlmCallError, match="the connection closed") as caught:
        asyncio.run(llm.complete(REQUEST))
    assert caught.value.partial_text == "Oslo is sunny t"
    with pytest.raises(LlmCallError) as again:  # one error raised by two streams says what each one streamed
        asyncio.run(llm.complete(REQUEST))
    assert again.value.partial_text == "Rain"


def test_the_builder_joins_argument_fragments_per_call_in_index_order() -> None:
    builder = ReplyBuilder()
    for event in (
        TextDelta("Checking"), ToolCallDelta(1, "c2", "clock", ""), ToolCallDelta(0, "c1", "search", '{"q"'),
        ToolCallDelta(0, arguments_fragment=': "x"}'), ToolCallDelta(1, arguments_fragment="{}"), Usage(3, 4),
    ):
        builder.add(event)
    assert builder.reply(model="m", stop_reason="tool_calls") == LlmReply(
        "Checking", (ToolCall("c1", "search", {"q": "x"}), ToolCall("c2", "clock", {})), "m", Usage(3, 4), "tool_calls"
    )


@pytest.mark.parametrize(("fragment", "error"), [('{"q": ', "they are not valid JSON"), ("[1, 2]", "they are not a JSON object")])
def test_arguments_that_are_not_a_json_object_reach_the_tool_loop_as_they_were_sent(fragment: str, error: str) -> None:
    """A streamed call with unreadable arguments failed the whole reply; the tool loop tells the model instead."""
    builder = ReplyBuilder()
    builder.add(ToolCallDelta(0, "c1", "search", fragment))
    (call,) = builder.reply().tool_calls
    assert (call.arguments, call.arguments_text) == ({}, fragment) and (call.arguments_error or "").startswith(error)
    replayed = ReplyBuilder()
    for event in reply_events(builder.reply()):
        replayed.add(event)
    assert replayed.reply() == builder.reply()


def test_replaying_a_reply_through_the_builder_gives_it_back() -> None:
    builder = ReplyBuilder()
    for event in reply_events(REPLY):
        builder.add(event)
    assert builder.reply(model="m", stop_reason="tool_calls") == REPLY
