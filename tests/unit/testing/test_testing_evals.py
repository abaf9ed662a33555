"""The eval fixture of the public test kit, from a plain test: a dataset on a scripted bot."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentloop.testing import RecordingChannel, ScriptedLLM
from agentloop.testing.bdd import BotUnderTest
from agentloop.testing.evals import EvaluateOnBot, evaluate_on_bot, judge_llm  # noqa: F401  (the fixtures)
from systems import standard_pipeline

GREETINGS = Path(__file__).parents[2] / "features" / "evals" / "greetings.yaml"


@pytest.fixture
def agentloop_bot(tmp_path: Path) -> Iterator[BotUnderTest]:
    llm = ScriptedLLM(["Hello! How can I help?", "Paris."])
    pipeline = standard_pipeline(llm, RecordingChannel(), data_dir=tmp_path)
    yield BotUnderTest(pipeline.build(), llm, RecordingChannel(), pipeline.stores)
    pipeline.close()


def test_evaluate_on_bot_runs_the_cases_in_order_on_the_scripted_model(agentloop_bot: BotUnderTest, evaluate_on_bot: EvaluateOnBot) -> None:
    report = evaluate_on_bot(agentloop_bot, GREETINGS)
    assert report.pass_rate == 1.0 and [run.case for run in report.runs] == ["greets", "knows the capital"]
