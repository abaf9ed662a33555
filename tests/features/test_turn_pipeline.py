"""Steps for turn_pipeline.feature; generic steps come from agentloop.testing.bdd."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pytest_bdd import given, parsers, scenarios, then

from agentloop import AgentContext, Attachment, PromptContext, System, ToolExecutions, tool
from agentloop.testing import RecordingChannel, ScriptedLLM
from agentloop.testing.bdd import BotUnderTest
from systems import StandardOptions, StandardPipeline, standard_pipeline

scenarios("turn_pipeline.feature")


@tool
def weather(city: str) -> str:
    """The current weather in a city."""
    return {"Oslo": "sunny", "Bergen": "rainy"}.get(city, "unknown")


@tool
def chart(title: str) -> Attachment:
    """A chart of a data set, as a PNG file."""
    return Attachment(f"{title}.png", "image/png", b"\x89PNG")


@tool
def explode() -> str:
    """A tool that always fails."""
    raise RuntimeError("the tool is broken")


BuildBot = Callable[..., BotUnderTest]


@pytest.fixture
def build_bot(
    scripted_llm: ScriptedLLM, recording_channel: RecordingChannel, tmp_path: Path
) -> Iterator[BuildBot]:
    pipelines: list[StandardPipeline] = []

    def build(options: StandardOptions | None = None, extra: System | None = None) -> BotUnderTest:
        pipeline = standard_pipeline(
            scripted_llm, recording_channel, data_dir=tmp_path, tools=[weather, chart, explode], options=options
        )
        pipelines.append(pipeline)
        if extra is not None:
            pipeline.insert(extra)
        return BotUnderTest(pipeline.build(), scripted_llm, recording_channel, pipeline.stores)

    yield build
    for pipeline in pipelines:
        pipeline.close()


@pytest.fixture
def agentloop_bot(build_bot: BuildBot) -> BotUnderTest:
    return build_bot()


@given("a pipeline in plan mode", target_fixture="bot")
def plan_mode_bot(build_bot: BuildBot) -> BotUnderTest:
    return build_bot(StandardOptions(plan_mode=True))


@given(parsers.parse("a pipeline that allows {calls:d} model calls"), target_fixture="bot")
def limited_bot(build_bot: BuildBot, calls: int) -> BotUnderTest:
    return build_bot(StandardOptions(max_llm_calls=calls))


@given(parsers.parse("a pipeline with a turn deadline of {seconds:g} seconds"), target_fixture="bot")
def deadline_bot(build_bot: BuildBot, seconds: float) -> BotUnderTest:
    return build_bot(StandardOptions(turn_timeout=seconds))


@given(parsers.parse('a pipeline with a system "{name}" that raises'), target_fixture="bot")
def flaky_bot(build_bot: BuildBot, name: str) -> BotUnderTest:
    def process(self: System, ctx: AgentContext) -> None:
        raise RuntimeError("flaky")

    flaky = type(name, (System,), {"order": 40, "process": process})()
    return build_bot(extra=flaky)


@given(parsers.parse('a pipeline with a system "{name}" that reads the prompt without declaring it'), target_fixture="bot")
def snooping_bot(build_bot: BuildBot, name: str) -> BotUnderTest:
    def process(self: System, ctx: AgentContext) -> None:
        ctx.get(PromptContext)

    snooper = type(name, (System,), {"order": 40, "process": process})()
    return build_bot(extra=snooper)


@then(parsers.parse("the tools ran in order: {names}"))
def tools_ran(bot: BotUnderTest, names: str) -> None:
    executions = bot.last.require(ToolExecutions).executions
    assert [e.tool_name for e in executions] == [n.strip() for n in names.split(",")]
    assert all(e.succeeded for e in executions)
    # one tool per model step, none run inside another: no parent, a step each
    assert all(e.parent_id is None for e in executions)
    assert len({e.step_id for e in executions}) == len(executions) and None not in {e.step_id for e in executions}


@then(parsers.parse('the user receives the plan "{step}"'))
def user_receives_plan(bot: BotUnderTest, step: str) -> None:
    texts = [s.text or "" for s in bot.last_sent if s.kind == "text"]
    assert len(texts) == 1 and step in texts[0].splitlines(), texts


@then("routing was not attempted")
def routing_not_attempted(bot: BotUnderTest) -> None:
    assert bot.outcome.routing_outcome is None and bot.outcome.outgoing_response is None


