"""Running one conversation (`run_conversation`): seeds reach the model, tool and model calls and
usage are counted, cost is priced, and the case is one span tree a tracing backend can show."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentloop import LlmReply, LlmRequest, tool
from agentloop.adapters import open_note_taking
from agentloop.adapters.otel import enable_otel
from agentloop.evals import MemorySeed, Seeds, case_session, run_conversation
from agentloop.messages import Usage
from agentloop.outcome import FinishReason
from agentloop.pricing import ModelPrice, Prices
from agentloop.telemetry import TELEMETRY
from agentloop.testing import RecordingChannel, ScriptedLLM
from systems import StandardPipeline, add_note_taking, standard_pipeline


@tool
def stock(item: str) -> str:
    """How many of an item are in stock."""
    if item == "unicorn":
        raise ValueError("no such item")
    return "3"


def answer(request: LlmRequest) -> LlmReply | str:
    last = request.messages[-1]
    if last.role.value == "tool":
        return LlmReply("checked", usage=Usage(100, 10))
    if "stock" in (last.content or ""):
        reply = ScriptedLLM.tool_call("stock", {"item": (last.content or "").split()[-1]})
        return LlmReply(None, reply.tool_calls, usage=Usage(80, 5))
    return LlmReply("ok", usage=Usage(50, 5))


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[tuple[StandardPipeline, ScriptedLLM]]:
    llm = ScriptedLLM(answer, model="priced-model")
    built = standard_pipeline(llm, RecordingChannel(), data_dir=tmp_path, tools=[stock])
    assert built.stores is not None
    with open_note_taking(built.stores, llm) as note_taking:
        add_note_taking(built, note_taking)
        yield built, llm
    built.close()


def test_seeded_notes_rag_texts_and_memory_reach_the_model_of_that_case_only(pipeline: tuple[StandardPipeline, ScriptedLLM]) -> None:
    built, llm = pipeline
    seeds = Seeds(notes=["# Refund rule\nRefund within 30 days."], rag=["The shop opens at nine."],
                  memory=[MemorySeed(user="my name is Ada", assistant="Hello Ada")])
    loop = built.build()
    asyncio.run(run_conversation(loop, ["refund rule and opening hours"], session=case_session("seeded"), stores=built.stores, seeds=seeds))
    prompt = "\n".join(m.content or "" for m in llm.requests[-1].messages)
    assert "Refund within 30 days." in prompt and "The shop opens at nine." in prompt and "Hello Ada" in prompt
    asyncio.run(run_conversation(loop, ["refund rule and opening hours"], session=case_session("other"), stores=built.stores))
    other = "\n".join(m.content or "" for m in llm.requests[-1].messages)
    assert "Refund within 30 days." not in other and "nine" not in other and "Ada" not in other


def test_seeds_without_stores_are_refused(pipeline: tuple[StandardPipeline, ScriptedLLM]) -> None:
    built, _ = pipeline
    with pytest.raises(ValueError, match="needs the bot's stores"):
        asyncio.run(run_conversation(built.build(), ["hi"], session=case_session("x"), seeds=Seeds(rag=["t"])))


def test_a_conversation_counts_its_turns_tool_and_model_calls_tokens_and_priced_cost(pipeline: tuple[StandardPipeline, ScriptedLLM]) -> None:
    built, _ = pipeline
    prices = Prices({"priced-model": ModelPrice(input=1.0, output=2.0)}, use_table=False)
    done = asyncio.run(run_conversation(built.build(), ["hi", "stock unicorn"], session=case_session("c"), prices=prices))
    assert [turn.answer for turn in done.turns] == ["ok", "checked"]
    assert done.finish_reason is FinishReason.SUCCESS
    assert [(c.name, c.arguments, c.turn, c.error is not None) for c in done.tool_calls] == [("stock", {"item": "unicorn"}, 1, True)]
    assert [(c.turn, c.input_tokens) for c in done.llm_calls] == [(0, 50), (1, 80), (1, 100)]
    assert done.usage == Usage(230, 20) and done.tokens == 250
    assert done.cost == pytest.approx((230 * 1.0 + 20 * 2.0) / 1_000_000)
    assert ("tool", "stock(item='unicorn') failed: ValueError: no such item") in done.transcript()


def test_an_unpriced_model_leaves_the_cost_unknown(pipeline: tuple[StandardPipeline, ScriptedLLM]) -> None:
    built, _ = pipeline
    done = asyncio.run(run_conversation(built.build(), ["hi"], session=case_session("c"), prices=Prices(use_table=False)))
    assert done.cost is None and done.tokens == 55


def test_each_case_is_one_otel_trace_case_turn_system_model_and_tool(pipeline: tuple[StandardPipeline, ScriptedLLM]) -> None:
    built, _ = pipeline
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    enable_otel(provider)
    try:
        done = asyncio.run(run_conversation(built.build(), ["stock apples"], session=case_session("traced"), name="traced"))
    finally:
        TELEMETRY.disable()
    spans = {span.context.span_id: span for span in exported.get_finished_spans()}

    def path(span_name: str) -> list[str]:
        span = next(s for s in spans.values() if s.name == span_name)
        names = [span.name]
        while span.parent is not None:
            span = spans[span.parent.span_id]
            names.append(span.name)
        return names[::-1]

    assert path("execute_tool stock") == ["eval case traced", "turn", "system ToolLoopSystem", "execute_tool stock"]
    assert path("chat priced-model") == ["eval case traced", "turn", "system ToolLoopSystem", "chat priced-model"]
    assert len({span.context.trace_id for span in spans.values()}) == 1
    assert [s.name for s in done.spans][:2] == ["eval case traced", "turn"] and len(done.spans) == len(spans)


def test_a_span_still_open_when_its_case_ends_leaves_the_finished_ones_pointing_at_their_nearest_finished_ancestor() -> None:
    from agentloop.evals.spans import case_spans

    with case_spans("case", {}) as spans:
        TELEMETRY.tracer.start_span("stream", {})  # never ended, as a stream its reader left
        with TELEMETRY.span("after", {}):
            pass
    assert [(s.name, s.parent) for s in spans] == [("case", None), ("after", 0)]
