"""standard_pipeline(...): the standard systems in order, editable by class, built into an AgentLoop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import attrs

from agentloop import (
    AgentContext,
    ChatMessage,
    Finished,
    FinishReason,
    IncomingMessage,
    LlmReply,
    LlmRequest,
    LlmResponse,
    OutgoingResponse,
    PipelineError,
    Session,
    StreamEvent,
    System,
    TextDelta,
    TurnOutcome,
    history_scope,
    memory_scope,
    tool,
)
from agentloop.testing import RecordingChannel, ScriptedLLM, make_system
from systems import (
    MemoryPersistSystem,
    RagIndexingSystem,
    StandardOptions,
    ToolLoopSystem,
    standard_pipeline,
)


class Greeting(System):
    order = 15

    def process(self, ctx: AgentContext) -> None:
        pass


def test_the_standard_order(tmp_path: Path) -> None:
    with standard_pipeline(ScriptedLLM(), RecordingChannel(), data_dir=tmp_path) as pipeline:
        rows = [(row.order, row.name, row.always_run) for row in pipeline.describe().rows]
    assert rows == [
        (10, "InputSanitizationSystem", False), (20, "ContextBuildingSystem", False), (30, "ToolLoopSystem", False),
        (57, "TurnOutcomeFinalizationSystem", False), (59, "FeedbackGuaranteeSystem", True),
        (60, "ResponseRoutingSystem", True), (70, "MemoryPersistSystem", False), (72, "UsageRecordingSystem", True),
        (74, "CompactionSystem", False), (75, "RagIndexingSystem", False),
    ]
    assert (tmp_path / "bot.sqlite3").exists()


def test_insert_replace_remove_by_class(tmp_path: Path) -> None:
    channel = RecordingChannel()
    with standard_pipeline(ScriptedLLM(["hello"]), channel, data_dir=tmp_path, bot="b1",
                           options=StandardOptions(voice=False)) as pipeline:
        pipeline.insert(Greeting()).remove(RagIndexingSystem).replace(MemoryPersistSystem, MemoryPersistSystem())
        assert Greeting in pipeline and RagIndexingSystem not in pipeline
        assert [s.order for s in pipeline.systems][:3] == [10, 15, 20]
        assert pipeline.get(ToolLoopSystem).tools.get("send_voice") is None
        with pytest.raises(PipelineError, match="no RagIndexingSystem in the pipeline"):
            pipeline.remove(RagIndexingSystem)
        with pytest.raises(PipelineError, match="already has a system named 'Greeting'"):
            pipeline.insert(Greeting())
        ctx = pipeline.build().run_turn_sync(Session("s"), IncomingMessage("hi"))
        assert isinstance(ctx.turn_outcome, TurnOutcome) and channel.texts == ["hello"]
        assert pipeline.stores is not None and asyncio.run(pipeline.stores.memory.recent(memory_scope(Session("s")), 5)) == ()
        assert asyncio.run(pipeline.stores.rag.count()) == 0


def test_a_broken_edit_is_a_pipeline_error_at_build(tmp_path: Path) -> None:
    class NeedsOutcomeEarly(System):
        order = 5
        reads = (TurnOutcome,)

        def process(self, ctx: AgentContext) -> None:
            pass

    with standard_pipeline(ScriptedLLM(), RecordingChannel(), data_dir=tmp_path) as pipeline:
        pipeline.insert(NeedsOutcomeEarly())
        with pytest.raises(PipelineError, match="NeedsOutcomeEarly .* reads TurnOutcome"):
            pipeline.build()


def test_stores_or_data_dir(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="pass data_dir"):
        standard_pipeline(ScriptedLLM(), RecordingChannel())
    with standard_pipeline(ScriptedLLM(), RecordingChannel(), data_dir=tmp_path) as first:
        with pytest.raises(ValueError, match="not both"):
            standard_pipeline(ScriptedLLM(), RecordingChannel(), data_dir=tmp_path, stores=first.stores)
        shared = standard_pipeline(ScriptedLLM(), RecordingChannel(), stores=first.stores)
        assert shared.stores is first.stores
        assert shared.get(MemoryPersistSystem).sessions is first.stores.sessions


@pytest.mark.parametrize("texts", [{"text": " "}, {"deadline_text": ""}])
def test_a_blank_fallback_text_is_refused(texts: dict[str, str]) -> None:
    from systems import FeedbackGuaranteeSystem

    with pytest.raises(ValueError, match="a fallback must say something"):
        FeedbackGuaranteeSystem(**texts)


@attrs.define
class AnswersByItself(System):
    """A custom system that answers before the model is asked (order 25), as a cache would."""

    text: str
    order = 25
    writes = (LlmResponse,)

    def process(self, ctx: AgentContext) -> None:
        ctx.set(LlmResponse(self.text))


@attrs.define
class ReplacesTheAnswer(System):
    """A custom system that writes the turn's outcome after the model answered (order 40)."""

    text: str
    order = 40
    writes = (TurnOutcome,)

    def process(self, ctx: AgentContext) -> None:
        ctx.set(TurnOutcome(FinishReason.SUCCESS, self.text, OutgoingResponse.text_only(self.text)))


@attrs.frozen
class Answered:
    outcome: TurnOutcome
    sent: list[str]
    history: tuple[ChatMessage, ...]
    memory: tuple[str, ...]
    indexed: int
    model_requests: int
    charged: list[int]


def answer_by_itself(tmp_path: Path, system: System) -> Answered:
    """One turn of the standard pipeline with `system` inserted, in which the model would
    ask for the `charge` tool and then answer."""
    channel, session, charged = RecordingChannel(), Session("s", user_id="ada"), []

    @tool
    def charge(amount: int) -> str:
        """Charge the card."""
        charged.append(amount)
        return "charged"

    llm = ScriptedLLM([ScriptedLLM.tool_call("charge", {"amount": 5}), "the model's answer"])
    with standard_pipeline(llm, channel, data_dir=tmp_path, tools=[charge]) as pipeline:
        ctx = pipeline.insert(system).build().run_turn_sync(session, IncomingMessage("Open?"))
        assert pipeline.stores is not None and ctx.turn_outcome is not None
        memory = asyncio.run(pipeline.stores.memory.recent(memory_scope(session), 10))
        return Answered(
            ctx.turn_outcome, channel.texts, asyncio.run(pipeline.stores.sessions.recent(history_scope(session), 10)),
            tuple(entry.assistant_text for entry in memory), asyncio.run(pipeline.stores.rag.count()), len(llm.requests), charged,
        )


def test_a_custom_system_may_answer_by_itself_and_the_model_is_not_asked(tmp_path: Path) -> None:
    """The tool loop ran anyway: the model was asked and its tools run (a card charged) for an answer thrown away."""
    answered = answer_by_itself(tmp_path, AnswersByItself("Closed on Sundays."))
    assert (answered.model_requests, answered.charged) == (0, [])
    assert answered.outcome.assistant_text == "Closed on Sundays." and not answered.outcome.fallback
    assert answered.sent == ["Closed on Sundays."]
    assert answered.history == (ChatMessage.user("Open?"), ChatMessage.assistant("Closed on Sundays."))
    assert answered.memory == ("Closed on Sundays.",) and answered.indexed == 1


def test_an_outcome_a_custom_system_writes_after_the_model_is_the_one_kept(tmp_path: Path) -> None:
    answered = answer_by_itself(tmp_path, ReplacesTheAnswer("Closed on Sundays."))
    assert (answered.model_requests, answered.charged) == (2, [5])
    assert answered.outcome.assistant_text == "Closed on Sundays." and answered.sent == ["Closed on Sundays."]
    assert answered.history == (ChatMessage.user("Open?"), ChatMessage.assistant("Closed on Sundays."))


def test_an_outcome_written_before_the_tool_loop_is_refused_when_the_pipeline_is_built(tmp_path: Path) -> None:
    early = make_system("EarlyAnswer", 25, lambda ctx: None, writes=(TurnOutcome,))
    with standard_pipeline(ScriptedLLM(), RecordingChannel(), data_dir=tmp_path) as pipeline:
        with pytest.raises(PipelineError, match="EarlyAnswer .order 25. writes TurnOutcome before ToolLoopSystem"):
            pipeline.insert(early).build()
        assert pipeline.remove(ToolLoopSystem).build() is not None


def test_a_whitespace_only_answer_is_replaced_for_the_user_and_stored_nowhere(tmp_path: Path) -> None:
    answered = answer_by_itself(tmp_path, AnswersByItself(" \n "))
    assert answered.outcome.fallback and answered.outcome.assistant_text is None
    assert answered.sent == ["Sorry, something went wrong while I was answering. Please try again."]
    assert answered.history == (ChatMessage.user("Open?"),) and answered.memory == () and answered.indexed == 0


def test_a_stream_that_stalls_past_the_deadline_is_withdrawn_and_nothing_of_it_is_stored(tmp_path: Path) -> None:
    class Stalls:
        async def complete(self, request: LlmRequest) -> LlmReply:
            raise AssertionError("the tool loop streams")

        async def stream(self, request: LlmRequest) -> AsyncIterator[StreamEvent]:
            yield TextDelta("It is sun")
            await asyncio.sleep(5)
            yield Finished(LlmReply("It is sunny."))

    channel = RecordingChannel()
    session = Session("stall", user_id="u")
    options = StandardOptions(turn_timeout=0.1)
    with standard_pipeline(Stalls(), channel, data_dir=tmp_path, options=options) as pipeline:
        ctx = pipeline.build().run_turn_sync(session, IncomingMessage("Weather?"))
        history = asyncio.run(pipeline.stores.sessions.recent(history_scope(session), 10))  # type: ignore[union-attr]
    (stream,) = channel.streams
    assert stream.shown == "It is sun" and stream.aborted and stream.closed is None
    outcome = ctx.require(TurnOutcome)
    assert outcome.finish_reason is FinishReason.DEADLINE and outcome.assistant_text is None
    assert channel.texts == ["I ran out of time before finishing. Please try again."]
    assert history == ()
