"""Structured output: the answer validated into an attrs class, one repair round, both HTTP adapters."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Literal

import attrs
import pytest

from agentloop import (
    ChatMessage,
    FailureKind,
    FailureSource,
    IncomingMessage,
    LlmFailure,
    LlmReply,
    LlmResponse,
    PromptContext,
    Role,
    SanitizedInput,
    Session,
    StructuredOutput,
    ToolCall,
    tool,
)
from agentloop.adapters.llm.anthropic import AnthropicLLM
from agentloop.adapters.llm.openai import OpenAICompatibleLLM
from agentloop.context import AgentContext
from agentloop.ports import LLM, Channel
from agentloop.testing import RecordingChannel, ScriptedLLM, make_context, run_system_sync
from agentloop.testing.anthropic_server import message_events, queue_stream
from agentloop.testing.http import ScriptedServer, streamed_completion
from systems import ToolLoopSettings, ToolLoopSystem


@attrs.frozen
class Forecast:
    """The weather in one city.

    Args:
        city: the city's name.
        sky: what the sky looks like.
    """

    city: str
    sky: Literal["sunny", "cloudy", "rain"]
    high_c: float = 20.0


@tool
def weather(city: str) -> str:
    """The current weather in a city."""
    return "sunny, 24 C"


def context() -> AgentContext:
    return make_context(incoming=IncomingMessage("weather in Oslo?"), session=Session("s1", user_id="u1"),
                        components=[PromptContext("be exact", (ChatMessage.user("weather in Oslo?"),)),
                                    SanitizedInput("weather in Oslo?")])


def run(llm: LLM, channel: Channel | None = None) -> AgentContext:
    ctx = context()
    run_system_sync(ToolLoopSystem(llm, [weather], ToolLoopSettings(output_type=Forecast), channel=channel), ctx)
    return ctx


def test_the_answer_arrives_as_an_instance_and_the_model_is_shown_the_schema() -> None:
    llm = ScriptedLLM([ScriptedLLM.tool_call("weather", {"city": "Oslo"}), '{"city": "Oslo", "sky": "sunny", "high_c": 24}'])
    ctx = run(llm)
    assert ctx.require(StructuredOutput).value == Forecast("Oslo", "sunny", 24.0)
    assert json.loads(ctx.require(LlmResponse).text) == {"city": "Oslo", "sky": "sunny", "high_c": 24}
    schema = llm.requests[0].response_schema
    assert schema is not None and schema.description == "The weather in one city."
    assert schema.schema["properties"]["sky"] == {"enum": ["sunny", "cloudy", "rain"], "type": "string",
                                                  "description": "what the sky looks like."}
    assert schema.schema["required"] == ["city", "sky"]


@dataclasses.dataclass
class Reading:
    city: str
    degrees: float


@pytest.mark.parametrize("output_type", [Reading, list[Forecast], int])
def test_a_type_without_a_docstring_of_its_own_is_described_by_its_name(output_type: type) -> None:
    """Not by a dataclass's generated signature, nor by the docstring of list or int."""
    llm = ScriptedLLM(["[]"])
    run_system_sync(ToolLoopSystem(llm, settings=ToolLoopSettings(output_type=output_type)), context())
    schema = llm.requests[0].response_schema
    assert schema is not None and schema.description == f"Give the answer as {output_type.__name__}."


def test_an_answer_given_as_the_answer_tool_call_counts_too() -> None:
    ctx = run(ScriptedLLM([ScriptedLLM.tool_call("final_answer", {"city": "Oslo", "sky": "rain"})]))
    assert ctx.require(StructuredOutput).value == Forecast("Oslo", "rain")


def test_a_wrong_answer_gets_one_repair_round_with_the_validation_error() -> None:
    llm = ScriptedLLM(['{"city": "Oslo", "sky": "snow"}', ScriptedLLM.answer(Forecast("Oslo", "cloudy"))])
    ctx = run(llm)
    assert ctx.require(StructuredOutput).value == Forecast("Oslo", "cloudy")
    told = llm.requests[1].messages[-1]
    assert told.role is Role.USER and "sky: input should be 'sunny', 'cloudy' or 'rain', got 'snow'" in (told.content or "")
    assert ctx.failures == ()


def test_an_answer_tool_call_whose_arguments_are_cut_short_is_repaired_with_the_json_error() -> None:
    cut = ToolCall("c1", "final_answer", arguments_error="they are not valid JSON", arguments_text='{"city": "Os')
    llm = ScriptedLLM([LlmReply(tool_calls=(cut,)), ScriptedLLM.answer(Forecast("Oslo", "rain"))])
    ctx = run(llm)
    repair = llm.requests[1].messages[-1]
    assert repair.role is Role.TOOL and "invalid json" in (repair.content or "")
    assert "required" not in (repair.content or ""), "the model was told a field it sent is missing"
    assert ctx.require(StructuredOutput).value == Forecast("Oslo", "rain")


def test_a_second_wrong_answer_is_a_validation_failure() -> None:
    llm = ScriptedLLM([ScriptedLLM.tool_call("final_answer", {"city": "Oslo"}), "it is sunny", "unused"])
    ctx = run(llm)
    assert not ctx.has(StructuredOutput) and not ctx.has(LlmResponse) and llm.remaining == 1
    error = ctx.require(LlmFailure)
    assert error.kind is FailureKind.VALIDATION and "the answer does not fit Forecast" in error.message
    assert [(f.source, f.kind) for f in ctx.failures] == [(FailureSource.LLM, FailureKind.VALIDATION)]
    repair = llm.requests[1].messages[-1]
    assert repair.role is Role.TOOL and "the field 'sky' is required" in (repair.content or "")


def test_a_structured_answer_is_not_streamed_to_the_user() -> None:
    channel = RecordingChannel()
    run(ScriptedLLM(['{"city": "Oslo", "sky": "sunny"}'], chunk=3), channel=channel)
    assert channel.streams == []


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as scripted:
        yield scripted


def test_the_openai_adapter_sends_the_schema_as_response_format(server: ScriptedServer) -> None:
    server.stream(streamed_completion('{"city": "Oslo", "sky": "sunny"}'))
    ctx = run(OpenAICompatibleLLM(server.url, "m1"))
    assert ctx.require(StructuredOutput).value == Forecast("Oslo", "sunny")
    sent = server.requests[0]["body"]["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["name"] == "final_answer"
    assert sent["json_schema"]["schema"]["required"] == ["city", "sky"]


def test_the_anthropic_adapter_offers_an_answer_tool_and_reads_the_streamed_call(server: ScriptedServer) -> None:
    queue_stream(server, message_events(None, [("toolu_1", "final_answer", {"city": "Oslo", "sky": "rain"})], chunk=5))
    ctx = run(AnthropicLLM(server.url, "claude-test"))
    assert ctx.require(StructuredOutput).value == Forecast("Oslo", "rain")
    body = server.requests[0]["body"]
    assert body["tool_choice"] == {"type": "any"}
    answer_tool = body["tools"][-1]
    assert answer_tool["name"] == "final_answer" and answer_tool["input_schema"]["required"] == ["city", "sky"]


def test_the_anthropic_adapter_forces_the_answer_tool_when_there_is_no_other(server: ScriptedServer) -> None:
    queue_stream(server, message_events(None, [("toolu_1", "final_answer", {"city": "Oslo", "sky": "sunny"})]))
    ctx = context()
    run_system_sync(ToolLoopSystem(AnthropicLLM(server.url, "claude-test"), settings=ToolLoopSettings(voice=False, output_type=Forecast)), ctx)
    assert ctx.require(StructuredOutput).value == Forecast("Oslo", "sunny")
    assert server.requests[0]["body"]["tool_choice"] == {"type": "tool", "name": "final_answer"}
