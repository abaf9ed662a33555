"""Evaluating a dataset inside a test (needs the `test` and `evals` extras): a fixture and BDD steps.

    from agentloop.testing.evals import *  # noqa: F403  (the steps and their fixtures)

The steps evaluate on the scenario's `bot` (`Given a pipeline`, from `agentloop.testing.bdd`);
the `judge_llm` fixture is the scripted model judging the criteria. Cases run one at a time, so a
scripted model answers them in the order of the dataset. Steps:

    Given the eval dataset "PATH"               (relative to the test module's directory)
    Given the judge model replies "TEXT"
    Given the judge model answers {"pass": true, "reason": "TEXT"}
    When the dataset is evaluated
    When the dataset is evaluated 3 times
    Then the pass rate is at least 0.9
    Then the case "NAME" passes
    Then the case "NAME" fails
    Then the check "CHECK" of the case "NAME" passes
    Then the check "CHECK" of the case "NAME" fails saying "TEXT"

The `evaluate_on_bot` fixture does the same from a plain test:
`evaluate_on_bot(agentloop_bot, "cases.yaml").pass_rate >= 0.9`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from pytest_bdd import given, parsers, then, when

from agentloop.adapters.llm.scripted import ScriptedLLM
from agentloop.evals import EvalDataset, EvalReport, evaluate_dataset, load_dataset
from agentloop.evals.report import CaseRun
from agentloop.testing.bdd import BotUnderTest

EvaluateOnBot = Callable[..., EvalReport]


@pytest.fixture
def judge_llm() -> ScriptedLLM:
    """The model judging the dataset's criteria; `Given the judge model replies ...` adds to its script."""
    return ScriptedLLM(model="scripted-judge")


@pytest.fixture
def evaluate_on_bot(judge_llm: ScriptedLLM, request: pytest.FixtureRequest) -> EvaluateOnBot:
    """A function evaluating a dataset (a path relative to the test module, or an `EvalDataset`) on a
    `BotUnderTest`, cases one at a time, criteria judged by `judge_llm`; returns the report."""

    def evaluate(bot: BotUnderTest, dataset: str | Path | EvalDataset, *, repeat: int = 1) -> EvalReport:
        loaded = dataset if isinstance(dataset, EvalDataset) else load_dataset(Path(request.path).parent / dataset)
        evaluation = evaluate_dataset(loaded, bot.loop, stores=bot.stores, judge=judge_llm, concurrency=1, repeat=repeat)
        return asyncio.run(evaluation).report

    return evaluate


@given(parsers.parse('the eval dataset "{path}"'), target_fixture="eval_dataset")
def given_eval_dataset(path: str, request: pytest.FixtureRequest) -> EvalDataset:
    return load_dataset(Path(request.path).parent / path)


@given(parsers.parse('the judge model replies "{text}"'))
def given_judge_replies(judge_llm: ScriptedLLM, text: str) -> None:
    judge_llm.add(text)


@given(parsers.re(r"the judge model answers (?P<verdict>\{.*\})$"))
def given_judge_answers(judge_llm: ScriptedLLM, verdict: str) -> None:
    judge_llm.add(verdict)


@when("the dataset is evaluated", target_fixture="eval_report")
def when_evaluated(bot: BotUnderTest, eval_dataset: EvalDataset, evaluate_on_bot: EvaluateOnBot) -> EvalReport:
    return evaluate_on_bot(bot, eval_dataset)


@when(parsers.parse("the dataset is evaluated {times:d} times"), target_fixture="eval_report")
def when_evaluated_times(bot: BotUnderTest, eval_dataset: EvalDataset, evaluate_on_bot: EvaluateOnBot, times: int) -> EvalReport:
    return evaluate_on_bot(bot, eval_dataset, repeat=times)


@then(parsers.parse("the pass rate is at least {rate:g}"))
def then_pass_rate(eval_report: EvalReport, rate: float) -> None:
    assert eval_report.pass_rate >= rate, f"pass rate {eval_report.pass_rate:.2f}; failed: {_failures(eval_report)}"


def _runs(report: EvalReport, case: str) -> list[CaseRun]:
    runs = [run for run in report.runs if run.case == case]
    assert runs, f"no case {case!r}; the report has {sorted({run.case for run in report.runs})}"
    return runs


def _failures(report: EvalReport) -> list[str]:
    return [f"{run.case}: {run.error or '; '.join(f'{c.name}: {c.reason}' for c in run.checks if not c.passed)}"
            for run in report.runs if not run.passed]


@then(parsers.parse('the case "{case}" passes'))
def then_case_passes(eval_report: EvalReport, case: str) -> None:
    runs = _runs(eval_report, case)
    assert all(run.passed for run in runs), _failures(eval_report)


@then(parsers.parse('the case "{case}" fails'))
def then_case_fails(eval_report: EvalReport, case: str) -> None:
    runs = _runs(eval_report, case)
    assert not any(run.passed for run in runs), [run.checks for run in runs]


def _check(report: EvalReport, case: str, check: str) -> list[tuple[bool, str]]:
    found = [(c.passed, c.reason or "") for run in _runs(report, case) for c in run.checks if c.name == check]
    assert found, f"case {case!r} has no check {check!r}: {[c.name for c in _runs(report, case)[0].checks]}"
    return found


@then(parsers.parse('the check "{check}" of the case "{case}" passes'))
def then_check_passes(eval_report: EvalReport, case: str, check: str) -> None:
    found = _check(eval_report, case, check)
    assert all(passed for passed, _ in found), found


@then(parsers.parse('the check "{check}" of the case "{case}" fails saying "{text}"'))
def then_check_fails(eval_report: EvalReport, case: str, check: str, text: str) -> None:
    found = _check(eval_report, case, check)
    assert all(not passed and text in reason for passed, reason in found), found


__all__ = [
    "EvaluateOnBot",
    "evaluate_on_bot",
    "judge_llm",
    *sorted(name for name in dict(globals()) if name.startswith("pytestbdd_")),
]
