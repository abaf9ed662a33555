"""Steps for streaming.feature; generic steps come from agentloop.testing.bdd."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pytest_bdd import given, parsers, scenarios

from agentloop import tool
from agentloop.testing import RecordingChannel, ScriptedLLM
from agentloop.testing.bdd import BotUnderTest
from systems import StandardOptions, StandardPipeline, standard_pipeline

scenarios("streaming.feature")


@tool
def weather(city: str) -> str:
    """The current weather in a city."""
    return {"Oslo": "sunny"}.get(city, "unknown")


BuildBot = Callable[[StandardOptions | None], BotUnderTest]


@pytest.fixture
def build_bot(scripted_llm: ScriptedLLM, recording_channel: RecordingChannel, tmp_path: Path) -> Iterator[BuildBot]:
    pipelines: list[StandardPipeline] = []

    def build(options: StandardOptions | None) -> BotUnderTest:
        pipeline = standard_pipeline(scripted_llm, recording_channel, data_dir=tmp_path, tools=[weather], options=options)
        pipelines.append(pipeline)
        return BotUnderTest(pipeline.build(), scripted_llm, recording_channel, pipeline.stores)

    yield build
    for pipeline in pipelines:
        pipeline.close()


@pytest.fixture
def agentloop_bot(build_bot: BuildBot) -> BotUnderTest:
    return build_bot(None)


@given(parsers.parse("a pipeline with a turn deadline of {seconds:g} seconds"), target_fixture="bot")
def deadline_bot(build_bot: BuildBot, seconds: float) -> BotUnderTest:
    return build_bot(StandardOptions(turn_timeout=seconds))
