"""Structured output: the schema a model's final answer must fit, and the check that it does.

`OutputType(Invoice)` gives the `ResponseSchema` to send with the request and turns what the model
answered (JSON text, or the arguments of the answer tool) into an `Invoice`, or says what was wrong.
"""

from __future__ import annotations

import json
from typing import Any, Generic, TypeVar

import pydantic

from agentloop._schemas import adapter, class_summary, error_lines, json_schema
from agentloop.messages import ResponseSchema
from agentloop.errors import AgentloopError

T = TypeVar("T")

ANSWER_TOOL = "final_answer"
"""The tool a provider without a JSON response format offers for the answer."""


class OutputValidationError(ValueError, AgentloopError):
    """The model's answer does not fit the output type; the message lists each problem."""


class OutputType(Generic[T]):
    """The type a turn's answer is validated into, with its JSON schema for the model."""

    def __init__(self, cls: type[T]) -> None:
        self.cls = cls
        self._adapter = adapter(cls)
        name = getattr(cls, "__name__", None) or str(cls)
        self.schema = ResponseSchema(ANSWER_TOOL, json_schema(self._adapter), class_summary(cls) or f"Give the answer as {name}.")

    def parse(self, answer: str | dict[str, Any]) -> T:
        """`answer` (JSON text or an already decoded object) as a `T`; `OutputValidationError` if it does not fit."""
        try:
            if isinstance(answer, str):
                value: T = self._adapter.validate_json(answer.strip())
            else:
                value = self._adapter.validate_python(answer)
        except pydantic.ValidationError as exc:
            raise OutputValidationError(
                f"the answer does not fit {self.cls.__name__}: {'; '.join(error_lines(exc, 'field'))}"
            ) from None
        return value

    @staticmethod
    def text_of(answer: str | dict[str, Any]) -> str:
        """The answer as the JSON text stored as the turn's reply."""
        return answer if isinstance(answer, str) else json.dumps(answer)
