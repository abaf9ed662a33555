"""Eval datasets: cases (a conversation, seeds, expectations, tags), read from YAML, JSON or JSONL.

The file format is checked by pydantic models, so `dataset_schema()` is the JSON schema a user
validates a dataset against (`agentloop eval --schema`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agentloop.evals.errors import DatasetError
from agentloop.outcome import FinishReason

__all__ = [
    "AnswerExpectation",
    "BudgetExpectation",
    "EvalCase",
    "EvalDataset",
    "Expectations",
    "MemorySeed",
    "OutputExpectation",
    "Seeds",
    "ToolsExpectation",
    "dataset_schema",
    "load_dataset",
]

_FINISH_REASONS = tuple(reason.value for reason in FinishReason)


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as error:
        raise ValueError(f"{pattern!r} is not a regular expression: {error}") from error
    return pattern


class AnswerExpectation(_Spec):
    """What the last answer of the conversation must be: equal to, containing, or matching (a regex searched)."""

    equals: str | None = None
    contains: list[str] = Field(default_factory=list, description="every text must appear in the answer")
    matches: str | None = Field(default=None, description="a regular expression searched in the answer")

    @field_validator("matches")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        return value if value is None else _regex(value)


class OutputExpectation(_Spec):
    """The last answer as structured output: JSON that validates against `schema` and has `fields`."""

    json_schema: dict[str, Any] | None = Field(default=None, alias="schema", description="a JSON schema the answer validates against")
    has: list[str] = Field(default_factory=list, description="fields (dotted paths) the answer must have")
    fields: dict[str, Any] = Field(default_factory=dict, description="fields (dotted paths) and the value each must hold")


class ToolsExpectation(_Spec):
    """The tools the conversation called: names, their order, and their arguments by pattern."""

    called: list[str] = Field(default_factory=list, description="each of these tools ran at least once")
    order: list[str] = Field(default_factory=list, description="these tools ran in this order (others may run between)")
    not_called: list[str] = Field(default_factory=list, description="none of these tools ran")
    arguments: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="tool name -> argument name -> a regular expression one call's argument matches"
    )

    @field_validator("arguments")
    @classmethod
    def _patterns(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        for patterns in value.values():
            for pattern in patterns.values():
                _regex(pattern)
        return value


class BudgetExpectation(_Spec):
    """Upper bounds over the whole conversation."""

    tokens: int | None = Field(default=None, ge=0, description="input plus output tokens of every model call")
    cost: float | None = Field(default=None, ge=0, description="US dollars; an unpriced model fails this bound")
    llm_calls: int | None = Field(default=None, ge=0)
    tool_calls: int | None = Field(default=None, ge=0)
    latency: float | None = Field(default=None, gt=0, description="seconds, all turns together")


class Expectations(_Spec):
    """What a case checks; each present part is one evaluator in the report."""

    answer: AnswerExpectation | None = None
    output: OutputExpectation | None = None
    tools: ToolsExpectation | None = None
    finish_reason: Literal[_FINISH_REASONS] | None = Field(  # type: ignore[valid-type]
        default=None, description="how the last turn ended"
    )
    budget: BudgetExpectation | None = None
    judge: list[str] = Field(default_factory=list, description="criteria an LLM judge decides from the transcript")


class MemorySeed(_Spec):
    """An earlier exchange the user had, put in memory before the conversation."""

    user: str
    assistant: str


class Seeds(_Spec):
    """What the case's tenant holds before its first message."""

    notes: list[str] = Field(default_factory=list, description="notes (Markdown) the note retrieval can find")
    rag: list[str] = Field(default_factory=list, description="texts the RAG search can find")
    memory: list[MemorySeed] = Field(default_factory=list)


class EvalCase(_Spec):
    """One conversation on a fresh session: the user's messages in order, with its seeds and expectations."""

    name: str = Field(min_length=1)
    messages: list[str] = Field(min_length=1, description="the user's messages, one turn each")
    seeds: Seeds = Seeds()
    expect: Expectations = Expectations()
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


class EvalDataset(_Spec):
    """A named list of cases with distinct names."""

    name: str = Field(min_length=1)
    cases: list[EvalCase] = Field(min_length=1)

    @field_validator("cases")
    @classmethod
    def _distinct(cls, cases: list[EvalCase]) -> list[EvalCase]:
        seen: set[str] = set()
        for case in cases:
            if case.name in seen:
                raise ValueError(f"two cases are named {case.name!r}; case names must be distinct")
            seen.add(case.name)
        return cases


def dataset_schema() -> dict[str, Any]:
    """The JSON schema of a dataset file (YAML and JSON files alike; a JSONL line is one case)."""
    schema = EvalDataset.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "agentloop eval dataset"
    return schema


def load_dataset(path: str | Path) -> EvalDataset:
    """The dataset in `path`: `.yaml`/`.yml` or `.json` (a mapping with `name` and `cases`), or
    `.jsonl` (one case a line, the dataset named after the file)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise DatasetError(f"cannot read the dataset {path}: {error.strerror or error}") from error
    data = _parsed(path, text)
    try:
        return EvalDataset.model_validate(data)
    except ValidationError as error:
        raise DatasetError(f"{path}: {_first_problem(error, data)}") from error


def _parsed(path: Path, text: str) -> Any:
    suffix = path.suffix.lower()
    try:
        if suffix in (".yaml", ".yml"):
            import yaml

            return yaml.safe_load(text)
        if suffix == ".jsonl":
            cases = [json.loads(line) for line in text.splitlines() if line.strip()]
            return {"name": path.stem, "cases": cases}
        if suffix == ".json":
            return json.loads(text)
    except ImportError as error:
        raise DatasetError(f"YAML datasets need PyYAML: pip install 'agentloop-ecs[evals]' ({error})") from error
    except ValueError as error:  # json.JSONDecodeError and yaml.YAMLError's parser errors alike
        raise DatasetError(f"{path} is not valid {suffix.lstrip('.').upper()}: {error}") from error
    except Exception as error:  # yaml.YAMLError, which is not a ValueError
        raise DatasetError(f"{path} is not valid YAML: {error}") from error
    raise DatasetError(f"{path}: a dataset is a .yaml, .yml, .json or .jsonl file")


def _first_problem(error: ValidationError, data: Any) -> str:
    """The first validation problem as a sentence naming the case (by name when it has one) and the field."""
    problem = error.errors()[0]
    where = list(problem["loc"])
    if len(where) >= 2 and where[0] == "cases" and isinstance(where[1], int):
        cases = data.get("cases") if isinstance(data, dict) else None
        named = cases[where[1]].get("name") if isinstance(cases, list) and isinstance(cases[where[1]], dict) else None
        label = f"case {named!r}" if named else f"case {where[1] + 1}"
        where = [label, *where[2:]]
    field = ".".join(str(part) for part in where) or "the file"
    more = len(error.errors()) - 1
    return f"{field}: {problem['msg']}" + (f" (and {more} more problems)" if more else "")
