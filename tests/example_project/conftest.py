"""The shared agentloop steps, and the bot under test: the standard pipeline with a welcome."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentloop.testing import RecordingChannel, ScriptedLLM
from agentloop.testing.bdd import *  # noqa: F403  (the shared steps and their fixtures)
from agentloop.testing.bdd import BotUnderTest
from systems import standard_pipeline
from welcome_bot import WelcomeSystem


@pytest.fixture
def welcome() -> str:
    """The welcome of the bot under test; a scenario may set another."""
    return "Welcome!"


@pytest.fixture
def agentloop_bot(
    scripted_llm: ScriptedLLM, recording_channel: RecordingChannel, tmp_path: Path, welcome: str
) -> Iterator[BotUnderTest]:
    pipeline = standard_pipeline(scripted_llm, recording_channel, data_dir=tmp_path)
    pipeline.insert(WelcomeSystem(welcome))
    yield BotUnderTest(pipeline.build(), scripted_llm, recording_channel, pipeline.stores)
    pipeline.close()
