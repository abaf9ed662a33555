"""The evaluators a case's expectations become: pydantic-evals `Evaluator`s over a `Conversation`.

Each returns one assertion named for its expectation (`answer`, `output`, `tools`,
`finish_reason`, `budget`, `judge: CRITERION`), true or false with a reason that says what
differed. The judge asks a model through agentloop's LLM port, so any configured provider judges.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic_evals.evaluators import EvaluationReason, Evaluator, EvaluatorContext

from agentloop.errors import LlmCallError
from agentloop.evals.dataset import AnswerExpectation, BudgetExpectation, EvalCase, OutputExpectation, ToolsExpectation
from agentloop.evals.run import Conversation
from agentloop.messages import ChatMessage, LlmRequest
from agentloop.ports.llm import LLM

__all__ = [
    "AnswerMatches",
    "FinishedWith",
    "JudgedBy",
    "OutputValidates",
    "ToolsCalled",
    "WithinBudget",
    "evaluators_for",
]

JUDGE_PROMPT = (
    "You judge one conversation of a bot against one criterion. Read the transcript and decide whether the "
    'criterion holds. Answer with JSON only: {"pass": true or false, "reason": "one sentence"}.'
)

EvalContext = EvaluatorContext[Any, Conversation, Any]


def _verdict(problems: list[str], passed: str) -> EvaluationReason:
    return EvaluationReason(not problems, "; ".join(problems) if problems else passed)


@dataclass
class AnswerMatches(Evaluator[Any, Conversation, Any]):
    """The last answer equals, contains or matches what the case expects."""

    expected: AnswerExpectation

    def evaluate(self, ctx: EvalContext) -> EvaluationReason:
        answer, want, problems = ctx.output.answer or "", self.expected, []
        if want.equals is not None and answer != want.equals:
            problems.append(f"expected {want.equals!r}, got {answer!r}")
        problems += [f"{answer!r} does not contain {text!r}" for text in want.contains if text not in answer]
        if want.matches is not None and re.search(want.matches, answer) is None:
            problems.append(f"{answer!r} does not match /{want.matches}/")
        return _verdict(problems, "the answer is as expected")

    def get_default_evaluation_name(self) -> str:
        return "answer"


@dataclass
class OutputValidates(Evaluator[Any, Conversation, Any]):
    """The last answer is JSON that validates against the schema and holds the expected fields."""

    expected: OutputExpectation

    def evaluate(self, ctx: EvalContext) -> EvaluationReason:
        try:
            value = json.loads(ctx.output.answer or "")
        except ValueError:
            return EvaluationReason(False, f"the answer is not JSON: {ctx.output.answer!r}")
        problems = _schema_problems(value, self.expected.json_schema) if self.expected.json_schema is not None else []
        problems += [f"no field {path!r}" for path in self.expected.has if _field(value, path) is _MISSING]
        for path, wanted in self.expected.fields.items():
            found = _field(value, path)
            if found != wanted:
                problems.append(f"field {path!r} is {'missing' if found is _MISSING else repr(found)}, expected {wanted!r}")
        return _verdict(problems, "the output validates and has its fields")

    def get_default_evaluation_name(self) -> str:
        return "output"


_MISSING = object()


def _field(value: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _schema_problems(value: Any, schema: dict[str, Any]) -> list[str]:
    import jsonschema

    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{'/'.join(map(str, error.absolute_path)) or 'the answer'}: {error.message}" for error in validator.iter_errors(value)]


@dataclass
class ToolsCalled(Evaluator[Any, Conversation, Any]):
    """The tools the conversation ran: which, in what order, with arguments matching patterns."""

    expected: ToolsExpectation

    def evaluate(self, ctx: EvalContext) -> EvaluationReason:
        calls, want = ctx.output.tool_calls, self.expected
        names = [call.name for call in calls]
        problems = [f"{name} was not called" for name in want.called if name not in names]
        problems += [f"{name} was called" for name in want.not_called if name in names]
        if want.order and not _in_order(want.order, names):
            problems.append(f"expected {' -> '.join(want.order)} in that order, ran {' -> '.join(names) or 'no tool'}")
        for name, patterns in want.arguments.items():
            if not any(call.name == name and _arguments_match(call.arguments, patterns) for call in calls):
                shown = ", ".join(f"{k}~/{v}/" for k, v in patterns.items())
                problems.append(f"no call of {name} with {shown}")
        return _verdict(problems, f"ran {' -> '.join(names) or 'no tool'}")

    def get_default_evaluation_name(self) -> str:
        return "tools"


def _in_order(wanted: list[str], names: list[str]) -> bool:
    remaining = iter(names)
    return all(name in remaining for name in wanted)  # `in` consumes the iterator up to the match


def _arguments_match(arguments: dict[str, Any], patterns: dict[str, str]) -> bool:
    def text(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value)

    return all(key in arguments and re.search(pattern, text(arguments[key])) for key, pattern in patterns.items())


@dataclass
class FinishedWith(Evaluator[Any, Conversation, Any]):
    """The last turn ended with the expected finish reason."""

    reason: str

    def evaluate(self, ctx: EvalContext) -> EvaluationReason:
        ended = ctx.output.finish_reason
        got = "no turn" if ended is None else ended.value
        return EvaluationReason(got == self.reason, f"ended {got}" + ("" if got == self.reason else f", expected {self.reason}"))

    def get_default_evaluation_name(self) -> str:
        return "finish_reason"


@dataclass
class WithinBudget(Evaluator[Any, Conversation, Any]):
    """The whole conversation stayed within its tokens, cost, model calls, tool calls and seconds."""

    budget: BudgetExpectation

    def evaluate(self, ctx: EvalContext) -> EvaluationReason:
        spent, limit, problems = ctx.output, self.budget, []
        for label, used, bound in (
            ("tokens", spent.tokens, limit.tokens),
            ("LLM calls", len(spent.llm_calls), limit.llm_calls),
            ("tool calls", len(spent.tool_calls), limit.tool_calls),
        ):
            if bound is not None and used > bound:
                problems.append(f"{used} {label} > {bound}")
        if limit.cost is not None:
            if spent.cost is None:
                problems.append("the cost is unknown (a model without a price)")
            elif spent.cost > limit.cost:
                problems.append(f"${spent.cost:.4f} > ${limit.cost:.4f}")
        if limit.latency is not None and spent.latency_s > limit.latency:
            problems.append(f"{spent.latency_s:.2f}s > {limit.latency:g}s")
        return _verdict(problems, "within budget")

    def get_default_evaluation_name(self) -> str:
        return "budget"


@dataclass
class JudgedBy(Evaluator[Any, Conversation, Any]):
    """A model decides whether `criterion` holds for the conversation's transcript."""

    criterion: str
    llm: LLM = field(repr=False)

    async def evaluate(self, ctx: EvalContext) -> EvaluationReason:
        transcript = "\n".join(f"{who}: {text}" for who, text in ctx.output.transcript())
        request = LlmRequest((
            ChatMessage.system(JUDGE_PROMPT),
            ChatMessage.user(f"Criterion: {self.criterion}\n\nTranscript:\n{transcript}"),
        ))
        try:
            reply = await self.llm.complete(request)
        except LlmCallError as error:
            return EvaluationReason(False, f"the judge model failed: {error}")
        return _judgement(reply.content or "")

    def get_default_evaluation_name(self) -> str:
        return f"judge: {self.criterion}"


def _judgement(text: str) -> EvaluationReason:
    """The judge's JSON verdict (the first object in its answer); an answer without one fails, quoting it."""
    found = re.search(r"\{.*\}", text, re.DOTALL)
    try:
        verdict = json.loads(found.group(0)) if found else None
    except ValueError:
        verdict = None
    if not isinstance(verdict, dict) or not isinstance(verdict.get("pass"), bool):
        return EvaluationReason(False, f'the judge did not answer {{"pass": ..., "reason": ...}}: {text[:200]!r}')
    return EvaluationReason(verdict["pass"], str(verdict.get("reason") or ("passes" if verdict["pass"] else "fails")))


def evaluators_for(case: EvalCase, judge: LLM | None) -> list[Evaluator[Any, Conversation, Any]]:
    """The evaluators of a case's expectations; judged criteria need `judge` (ValueError without one)."""
    expect = case.expect
    evaluators: list[Evaluator[Any, Conversation, Any]] = []
    if expect.answer is not None:
        evaluators.append(AnswerMatches(expect.answer))
    if expect.output is not None:
        evaluators.append(OutputValidates(expect.output))
    if expect.tools is not None:
        evaluators.append(ToolsCalled(expect.tools))
    if expect.finish_reason is not None:
        evaluators.append(FinishedWith(expect.finish_reason))
    if expect.budget is not None:
        evaluators.append(WithinBudget(expect.budget))
    if expect.judge and judge is None:
        raise ValueError(f"case {case.name!r} has criteria for an LLM judge, and no judge model was given")
    evaluators += [JudgedBy(criterion, judge) for criterion in expect.judge if judge is not None]
    return evaluators
