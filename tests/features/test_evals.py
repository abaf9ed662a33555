"""Steps for evals.feature; the eval steps come from agentloop.testing.evals, the generic ones from
agentloop.testing.bdd."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_bdd import given, parsers, scenarios, then, when

from agentloop import tool
from agentloop.cli import main
from agentloop.testing import RecordingChannel, ScriptedLLM
from agentloop.testing.bdd import BotUnderTest
from agentloop.testing.evals import *  # noqa: F403  (the eval steps and their fixtures)
from systems import standard_pipeline

scenarios("evals.feature")

HERE = Path(__file__).parent


@tool
def find_order(order_id: str) -> str:
    """Look an order up."""
    return f"order {order_id}: paid, 20 EUR"


@tool
def refund(order_id: str, amount: int) -> str:
    """Refund part of an order."""
    return f"refunded {amount} on {order_id}"


@pytest.fixture
def agentloop_bot(scripted_llm: ScriptedLLM, recording_channel: RecordingChannel, tmp_path: Path) -> Iterator[BotUnderTest]:
    pipeline = standard_pipeline(scripted_llm, recording_channel, data_dir=tmp_path, tools=[find_order, refund])
    yield BotUnderTest(pipeline.build(), scripted_llm, recording_channel, pipeline.stores)
    pipeline.close()


@given(parsers.parse('a baseline written by agentloop eval of "{dataset}" on "{pipeline}"'), target_fixture="baseline")
def given_baseline(dataset: str, pipeline: str, tmp_path: Path) -> Path:
    baseline = tmp_path / "baseline.json"
    assert main(["eval", str(HERE / dataset), "--pipeline", pipeline, "--json", str(baseline)]) == 0
    return baseline


@when(parsers.parse('agentloop eval runs "{dataset}" on "{pipeline}" against the baseline'), target_fixture="ended")
def when_eval_against_baseline(dataset: str, pipeline: str, baseline: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = main(["eval", str(HERE / dataset), "--pipeline", pipeline, "--baseline", str(baseline)])
    return status, capsys.readouterr().err


@then(parsers.parse('the command exits with status {code:d} naming the regression "{regression}"'))
def then_exits_naming(ended: tuple[int, str], code: int, regression: str) -> None:
    status, said = ended
    assert status == code, said
    assert regression in said
