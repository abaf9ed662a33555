"""What tasks produce: TaskResult, the sequential history of TaskOutputs, failure reasons.

`notes` is whatever the task produced, any JSON object; nothing here copies, trims or
rewrites it (I10).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import attrs

from agentloop.tasks.settings import AccumulationFormat


class TaskStatus(enum.Enum):
    COMPLETE = "COMPLETE"
    CONTINUATION = "CONTINUATION"
    """The task needs a subtask first; `TaskResult.subtask` says which."""
    FAILED = "FAILED"


class TaskFailureReason(enum.Enum):
    """Why a task failed (the `reason` of `TaskFailedError`)."""

    SUBTASK_FAILURE = "subtask_failure"
    OUTPUT_FORMAT_FAILURE = "output_format_failure"
    INPUT_VALIDATION_FAILURE = "input_validation_failure"
    EXECUTION_TIMEOUT = "execution_timeout"
    EXECUTION_HALTED = "execution_halted"
    TASK_REPORTED_FAILURE = "task_reported_failure"
    SUBTASK_CYCLE = "subtask_cycle"


@attrs.frozen
class SubtaskRequest:
    """A CONTINUATION's request: a registered `template` or an ad-hoc `description`."""

    template: str | None = None
    description: str | None = None
    inputs: dict[str, str] = attrs.field(factory=dict, hash=False)

    def __attrs_post_init__(self) -> None:
        if (self.template is None) == (self.description is None):
            raise ValueError("a subtask request names exactly one of `template` or `description`")

    @property
    def key(self) -> str:
        """What cycle detection compares: the template name, or the description."""
        return self.template if self.template is not None else f"description:{self.description}"


@attrs.frozen
class TaskResult:
    """The result of one task: its content, status and notes (kept exactly as produced)."""

    content: str
    status: TaskStatus = TaskStatus.COMPLETE
    notes: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    subtask: SubtaskRequest | None = None
    reason: TaskFailureReason | None = None
    """For FAILED results: why."""
    detail: str | None = None
    """For FAILED results: a sentence saying what went wrong."""


@attrs.frozen
class TaskOutput:
    """One finished step: its content (`output`; None in what later steps see under
    notes_only), its notes and when it finished."""

    step_id: str
    output: str | None
    notes: Mapping[str, Any] = attrs.field(hash=False)
    timestamp: datetime


@attrs.define
class SequentialHistory:
    """The steps a sequence has finished: each in full (`outputs`, what a failure reports
    as its partial results) and, through `snapshot`, in the sequence's accumulation format."""

    format: AccumulationFormat
    outputs: list[TaskOutput] = attrs.Factory(list)

    def record(self, step_id: str, result: TaskResult, timestamp: datetime) -> TaskOutput:
        """Keep the step's content and its notes (untouched)."""
        entry = TaskOutput(step_id, result.content, result.notes, timestamp)
        self.outputs.append(entry)
        return entry

    def snapshot(self) -> tuple[TaskOutput, ...]:
        """What later steps see: every step's notes, and its content only under full_output."""
        if self.format is AccumulationFormat.FULL_OUTPUT:
            return tuple(self.outputs)
        return tuple(attrs.evolve(entry, output=None) for entry in self.outputs)

    def __iter__(self) -> Iterator[TaskOutput]:
        return iter(self.snapshot())

    def __len__(self) -> int:
        return len(self.outputs)
