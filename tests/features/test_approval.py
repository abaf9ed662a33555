"""Steps for approval.feature; generic steps come from agentloop.testing.bdd."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_bdd import given, scenarios, when

from agentloop import tool
from agentloop.testing import RecordingChannel, ScriptedLLM
from agentloop.testing.bdd import BotUnderTest
from systems import StandardPipeline, standard_pipeline

scenarios("approval.feature")


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file for good."""
    return f"deleted {path}"


class Restartable:
    """The bot's pipelines on one data directory: each restart closes the running one and opens another."""

    def __init__(self, llm: ScriptedLLM, channel: RecordingChannel, data: Path) -> None:
        self.llm, self.channel, self.data = llm, channel, data
        self.pipeline: StandardPipeline | None = None

    def start(self) -> StandardPipeline:
        self.stop()
        self.pipeline = standard_pipeline(self.llm, self.channel, data_dir=self.data, tools=[delete_file])
        return self.pipeline

    def stop(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
            self.pipeline = None


@pytest.fixture
def restartable(scripted_llm: ScriptedLLM, recording_channel: RecordingChannel, tmp_path: Path) -> Iterator[Restartable]:
    bot = Restartable(scripted_llm, recording_channel, tmp_path)
    yield bot
    bot.stop()


@pytest.fixture
def agentloop_bot(restartable: Restartable) -> BotUnderTest:
    pipeline = restartable.start()
    return BotUnderTest(pipeline.build(), restartable.llm, restartable.channel, pipeline.stores)


@given('a pipeline with the tool "delete_file" that needs approval', target_fixture="bot")
def approval_bot(agentloop_bot: BotUnderTest) -> BotUnderTest:
    return agentloop_bot


@when("the bot restarts")
def bot_restarts(bot: BotUnderTest, restartable: Restartable) -> None:
    pipeline = restartable.start()
    bot.loop, bot.stores = pipeline.build(), pipeline.stores
