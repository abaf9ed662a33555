"""Errors of the task subsystem: templates, task ids, the lifecycle, and failed tasks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentloop.errors import AgentloopError

if TYPE_CHECKING:
    from agentloop.tasks.results import TaskFailureReason, TaskOutput, TaskResult


class TemplateError(ValueError, AgentloopError):
    """A task template could not be loaded; says which file, which line and why."""

    def __init__(self, message: str, *, file: str, line: int | None = None) -> None:
        where = f"template {file}" + (f" line {line}" if line is not None else "")
        super().__init__(f"{where}: {message}")
        self.file = file
        self.line = line
        self.reason = message


class ScriptsNotAllowedError(TemplateError):
    """A script task met a registry or evaluator that was not created with scripts allowed."""


class ContextManagementWarning(UserWarning):
    """Template settings that load but are probably a mistake (a task that sees no context)."""


class UnknownTemplateError(LookupError, AgentloopError):
    """No template of that name is registered."""

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        listing = ", ".join(known) or "none"
        super().__init__(f"no task template named {name!r} is registered (registered: {listing})")
        self.name = name


class InvalidTaskIdError(ValueError, AgentloopError):
    """A task id that could escape the notes directory or name nothing."""

    def __init__(self, task_id: str) -> None:
        super().__init__(
            f"task id {task_id!r} is not allowed: use 1-128 letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit, with no path separators and no '..'"
        )
        self.task_id = task_id


class InvalidTaskTransitionError(ValueError, AgentloopError):
    """A task lifecycle move that its current state does not allow."""

    def __init__(self, task_id: str, current: str, target: str, allowed_from: tuple[str, ...]) -> None:
        super().__init__(
            f"task {task_id!r} is {current}, so it cannot move to {target}; "
            f"that needs one of: {', '.join(allowed_from)}"
        )
        self.task_id = task_id
        self.current = current
        self.target = target


class ClaimLostError(ValueError, AgentloopError):
    """An agent moved or renewed a task it no longer holds: its claim's lease ran out first."""

    def __init__(self, task_id: str, agent: str, current: str, holder: str | None) -> None:
        now = f"{current}, claimed by {holder!r}" if holder else current
        super().__init__(
            f"task {task_id!r} is no longer claimed by {agent!r} (it is {now}): its lease ran out before it "
            f"was renewed; renew the claim within the lease (AttemptRunner does) or give TaskLifecycle a longer lease"
        )
        self.task_id = task_id
        self.agent = agent
        self.holder = holder


class UnknownTaskError(LookupError, AgentloopError):
    """No task with that id is in the task store."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"no task with id {task_id!r}; create it first")
        self.task_id = task_id


class TaskError(RuntimeError, AgentloopError):
    """A task could not produce a result; subclasses say whether a limit or the work failed."""


class ResourceExhaustedError(TaskError):
    """A task ran into a limit (`resource`: subtask_depth, continuations, ...)."""

    def __init__(self, resource: str, used: int, limit: int, message: str) -> None:
        super().__init__(message)
        self.resource = resource
        self.used = used
        self.limit = limit


class TaskFailedError(TaskError):
    """A task failed; `reason` is a `TaskFailureReason`, `result` the failed result if any.

    For `subtask_failure` in a sequence, `failed_step` (1-based), `total_steps` and
    `partial_results` (the outputs of the steps that completed) say how far it got.
    """

    def __init__(
        self,
        reason: TaskFailureReason,
        message: str,
        *,
        result: TaskResult | None = None,
        failed_step: int | None = None,
        total_steps: int | None = None,
        partial_results: tuple[TaskOutput, ...] = (),
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.result = result
        self.failed_step = failed_step
        self.total_steps = total_steps
        self.partial_results = partial_results
