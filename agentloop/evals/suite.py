"""Evaluating a dataset on a bot with pydantic-evals: each case a task run on a fresh session,
concurrently up to a bound, `repeat` times, with a progress bar; its report ours and pydantic-evals'."""

from __future__ import annotations

from typing import Any

import attrs
from pydantic_evals import Case, Dataset
from pydantic_evals.dataset import increment_eval_metric
from pydantic_evals.reporting import EvaluationReport

from agentloop.evals.dataset import EvalCase, EvalDataset
from agentloop.evals.evaluators import evaluators_for
from agentloop.evals.report import CaseRun, Check, EvalReport
from agentloop.evals.run import Conversation, case_session, run_conversation
from agentloop.evals.spans import recording_spans
from agentloop.loop import AgentLoop
from agentloop.ports.llm import LLM
from agentloop.ports.stores import Stores
from agentloop.pricing import Prices
from agentloop.scopes import DEFAULT_COMPANY

__all__ = ["Evaluation", "evaluate_dataset"]


@attrs.frozen
class Evaluation:
    """An evaluation's report, and pydantic-evals' own report of it (for its rendering)."""

    report: EvalReport
    details: EvaluationReport[EvalCase, Conversation, Any] = attrs.field(eq=False, repr=False)

    def table(self, width: int | None = None) -> str:
        """pydantic-evals' table: a row per case run, its checks, tokens, calls and durations."""
        return self.details.render(width=width, include_reasons=False, include_averages=True)


async def evaluate_dataset(
    dataset: EvalDataset,
    loop: AgentLoop,
    *,
    stores: Stores | None = None,
    judge: LLM | None = None,
    concurrency: int = 4,
    repeat: int = 1,
    progress: bool = False,
    prices: Prices | None = None,
    company_id: str = DEFAULT_COMPANY,
    model: str | None = None,
) -> Evaluation:
    """Run every case of `dataset` on `loop` (`repeat` times, `concurrency` at once), each on a fresh
    session in a tenant chain of its own, seeded through `stores`; `judge` decides the judged criteria."""
    runs: dict[str, int] = {}

    async def task(case: EvalCase) -> Conversation:
        runs[case.name] = run = runs.get(case.name, 0) + 1
        conversation = await run_conversation(
            loop, case.messages, session=case_session(case.name, run), name=case.name, stores=stores,
            seeds=case.seeds, prices=prices, company_id=company_id,
        )
        increment_eval_metric("tokens", conversation.tokens)
        increment_eval_metric("llm_calls", len(conversation.llm_calls))
        increment_eval_metric("tool_calls", len(conversation.tool_calls))
        return conversation

    cases = [
        Case(name=case.name, inputs=case, metadata={"tags": case.tags, **case.metadata}, evaluators=evaluators_for(case, judge))
        for case in dataset.cases
    ]
    pydantic_dataset: Dataset[EvalCase, Conversation, Any] = Dataset(name=dataset.name, cases=cases)
    with recording_spans():
        details = await pydantic_dataset.evaluate(
            task, name=dataset.name, task_name="agentloop", max_concurrency=concurrency, progress=progress, repeat=repeat,
        )
    report = EvalReport(dataset.name, _case_runs(details), repeat=repeat, model=model)
    return Evaluation(report, details)


def _case_runs(details: EvaluationReport[EvalCase, Conversation, Any]) -> tuple[CaseRun, ...]:
    """Our record of each case run pydantic-evals reported, in the dataset's order, then run order."""
    runs: list[CaseRun] = []
    for case in details.cases:
        conversation = case.output
        checks = tuple(Check(name, bool(result.value), result.reason) for name, result in case.assertions.items())
        checks += tuple(Check(failure.name, False, failure.error_message) for failure in case.evaluator_failures)
        runs.append(CaseRun(
            case.inputs.name, _run_index(case.name), checks, conversation.tokens, conversation.cost,
            len(conversation.llm_calls), len(conversation.tool_calls), conversation.latency_s,
            None if conversation.finish_reason is None else conversation.finish_reason.value,
            tuple(conversation.transcript()), tuple(case.inputs.tags), spans=conversation.spans,
        ))
    for failure in details.failures:
        runs.append(CaseRun(failure.inputs.name, _run_index(failure.name), (), tags=tuple(failure.inputs.tags),
                            error=failure.error_message))
    order = {name: index for index, name in enumerate(dict.fromkeys(c.inputs.name for c in details.cases))}
    return tuple(sorted(runs, key=lambda run: (order.get(run.case, len(order)), run.run)))


def _run_index(report_name: str) -> int:
    """The run number pydantic-evals put in a repeated case's name ("greets [2/3]" is 2); 1 otherwise."""
    if report_name.endswith("]") and "[" in report_name:
        counted = report_name.rsplit("[", 1)[1].split("/", 1)[0]
        if counted.isdigit():
            return int(counted)
    return 1
