"""Steps for tenancy.feature; the steps themselves come from agentloop.testing.bdd."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_bdd import scenarios

from agentloop.testing import RecordingChannel, ScriptedLLM
from agentloop.testing.bdd import BotUnderTest
from systems import standard_pipeline

scenarios("tenancy.feature")


@pytest.fixture
def agentloop_bot(scripted_llm: ScriptedLLM, recording_channel: RecordingChannel, tmp_path: Path) -> Iterator[BotUnderTest]:
    pipeline = standard_pipeline(scripted_llm, recording_channel, data_dir=tmp_path)
    yield BotUnderTest(pipeline.build(), scripted_llm, recording_channel, pipeline.stores)
    pipeline.close()
