"""Evaluating datasets and their reports: repeated runs and pass rates, the concurrency bound,
structured-output and judge checks, JSON round trips, regressions against a baseline, the HTML page."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import pytest

from agentloop import LlmRequest
from agentloop.errors import LlmCallError
from agentloop.evals import (
    BaselineError, CaseRun, Check, EvalDataset, EvalReport, evaluate_dataset, read_report, regressions, render_html,
)
from agentloop.outcome import FailureKind
from agentloop.testing import RecordingChannel, ScriptedLLM
from systems import StandardPipeline, standard_pipeline


def bot(llm: ScriptedLLM, tmp_path: Path) -> StandardPipeline:
    return standard_pipeline(llm, RecordingChannel(), data_dir=tmp_path)


def dataset(*cases: dict[str, object]) -> EvalDataset:
    return EvalDataset.model_validate({"name": "d", "cases": list(cases)})


def test_repeated_runs_give_each_case_a_pass_rate(tmp_path: Path) -> None:
    answers = itertools.cycle(["yes", "yes", "no"])
    pipeline = bot(ScriptedLLM(lambda request: next(answers)), tmp_path)
    evaluation = asyncio.run(evaluate_dataset(
        dataset({"name": "flaky", "messages": ["?"], "expect": {"answer": {"equals": "yes"}}}),
        pipeline.build(), stores=pipeline.stores, concurrency=1, repeat=3,
    ))
    pipeline.close()
    report = evaluation.report
    assert [run.run for run in report.runs] == [1, 2, 3]
    assert report.case_pass_rates() == {"flaky": pytest.approx(2 / 3)} and report.check_pass_rates() == {"answer": pytest.approx(2 / 3)}
    assert "flaky [3/3]" in evaluation.table()


def test_no_more_cases_run_at_once_than_the_concurrency_bound(tmp_path: Path) -> None:
    running, most = 0, 0

    async def answer(request: LlmRequest) -> str:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1
        return "ok"

    pipeline = bot(ScriptedLLM(answer), tmp_path)
    cases = [{"name": f"c{n}", "messages": ["hi"]} for n in range(8)]
    asyncio.run(evaluate_dataset(dataset(*cases), pipeline.build(), concurrency=3))
    pipeline.close()
    assert 1 < most <= 3


def test_structured_output_is_checked_against_its_schema_and_fields(tmp_path: Path) -> None:
    replies = iter(['{"city": "Oslo", "days": [1, 2]}', '{"city": 7}', "not json"])
    pipeline = bot(ScriptedLLM(lambda request: next(replies)), tmp_path)
    expect = {"output": {"schema": {"type": "object", "properties": {"city": {"type": "string"}}}, "has": ["days.1"], "fields": {"city": "Oslo"}}}
    cases = [{"name": name, "messages": ["forecast"], "expect": expect} for name in ("good", "wrong", "prose")]
    report = asyncio.run(evaluate_dataset(dataset(*cases), pipeline.build(), concurrency=1)).report
    pipeline.close()
    reasons = {run.case: run.checks[0].reason or "" for run in report.runs}
    assert [run.passed for run in report.runs] == [True, False, False]
    assert "city: 7 is not of type 'string'" in reasons["wrong"] and "no field 'days.1'" in reasons["wrong"]
    assert "field 'city' is 7, expected 'Oslo'" in reasons["wrong"] and reasons["prose"].startswith("the answer is not JSON")


def test_a_judge_that_does_not_answer_a_verdict_or_fails_fails_the_criterion(tmp_path: Path) -> None:
    judge = ScriptedLLM(["I think it is fine", LlmCallError("judge down", kind=FailureKind.UNKNOWN)])
    pipeline = bot(ScriptedLLM(lambda request: "hi"), tmp_path)
    cases = [{"name": name, "messages": ["hi"], "expect": {"judge": ["polite"]}} for name in ("prose", "down")]
    report = asyncio.run(evaluate_dataset(dataset(*cases), pipeline.build(), judge=judge, concurrency=1)).report
    pipeline.close()
    prose, down = (run.checks[0] for run in report.runs)
    assert not prose.passed and "the judge did not answer" in (prose.reason or "")
    assert not down.passed and "the judge model failed: judge down" in (down.reason or "")


def test_judged_criteria_without_a_judge_are_refused(tmp_path: Path) -> None:
    pipeline = bot(ScriptedLLM(["hi"]), tmp_path)
    with pytest.raises(ValueError, match="no judge model was given"):
        asyncio.run(evaluate_dataset(dataset({"name": "j", "messages": ["hi"], "expect": {"judge": ["kind"]}}), pipeline.build()))
    pipeline.close()


def run(case: str, *passed: bool, number: int = 1) -> CaseRun:
    return CaseRun(case, number, tuple(Check(f"check{n}", flag, "why") for n, flag in enumerate(passed)), tokens=10, cost=None)


def test_a_report_round_trips_through_its_json(tmp_path: Path) -> None:
    pipeline = bot(ScriptedLLM(lambda request: "hello"), tmp_path)
    report = asyncio.run(evaluate_dataset(
        dataset({"name": "a", "messages": ["hi"], "expect": {"answer": {"contains": ["hello"]}}}), pipeline.build(),
    )).report
    pipeline.close()
    report.write(tmp_path / "r.json")
    assert read_report(tmp_path / "r.json") == report and report.runs[0].spans


def test_a_file_that_is_not_a_report_is_a_baseline_error(tmp_path: Path) -> None:
    (tmp_path / "other.json").write_text(json.dumps({"cases": []}))
    with pytest.raises(BaselineError, match="is not a report written by `agentloop eval --json`"):
        read_report(tmp_path / "other.json")
    with pytest.raises(BaselineError, match="cannot read the baseline"):
        read_report(tmp_path / "absent.json")


def test_a_regression_is_a_case_or_check_passing_less_often_than_in_the_baseline() -> None:
    baseline = EvalReport("d", (run("kept", True), run("dropped", True, True), run("fixed", False), run("gone", True)))
    now = EvalReport("d", (run("kept", True), run("dropped", True, False), run("fixed", True), run("new", False)))
    assert [str(r) for r in regressions(now, baseline)] == [
        "dropped: pass rate 100% -> 0%", "dropped / check1: pass rate 100% -> 0%",
    ]


def test_the_html_report_is_self_contained_and_escapes_what_the_bot_said() -> None:
    hostile = CaseRun("c<1>", 1, (Check("answer", False, "<img src=x onerror=alert(1)>"),), transcript=(("assistant", "<script>x()</script>"),))
    page = render_html(EvalReport("d", (hostile,)))
    assert "<script>x()" not in page and "&lt;script&gt;x()&lt;/script&gt;" in page and "<img src=x" not in page
    assert "http" not in page.split("</style>")[0]  # no stylesheet or script fetched from elsewhere
