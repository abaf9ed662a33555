"""Evaluations (the `evals` extra): run a dataset of cases on a bot and report what passed.

A dataset (YAML, JSON or JSONL; `dataset_schema()` is its JSON schema) holds cases: a
conversation, seeds for its tenant, and expectations. `evaluate_dataset` runs each case on a
fresh session of the bot with pydantic-evals (concurrently, repeated), and gives an `EvalReport`
with pass rates, tokens, cost and latency, compared with a baseline by `regressions`.
`run_conversation` runs one conversation and returns what it did and cost.
"""

from agentloop.evals.dataset import (
    AnswerExpectation,
    BudgetExpectation,
    EvalCase,
    EvalDataset,
    Expectations,
    MemorySeed,
    OutputExpectation,
    Seeds,
    ToolsExpectation,
    dataset_schema,
    load_dataset,
)
from agentloop.evals.errors import BaselineError, DatasetError
from agentloop.evals.report import CaseRun, Check, EvalReport, Regression, read_report, regressions, render_html, summary_table
from agentloop.evals.run import Conversation, LlmCall, ToolCall, TurnResult, case_session, run_conversation, seed
from agentloop.evals.spans import RecordedSpan
from agentloop.evals.suite import Evaluation, evaluate_dataset

__all__ = [
    "AnswerExpectation",
    "BaselineError",
    "BudgetExpectation",
    "CaseRun",
    "Check",
    "Conversation",
    "DatasetError",
    "EvalCase",
    "EvalDataset",
    "EvalReport",
    "Evaluation",
    "Expectations",
    "LlmCall",
    "MemorySeed",
    "OutputExpectation",
    "RecordedSpan",
    "Regression",
    "Seeds",
    "ToolCall",
    "ToolsExpectation",
    "TurnResult",
    "case_session",
    "dataset_schema",
    "evaluate_dataset",
    "load_dataset",
    "read_report",
    "regressions",
    "render_html",
    "run_conversation",
    "seed",
    "summary_table",
]
