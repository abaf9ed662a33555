"""Exceptions raised by agentloop; each subclasses the builtin it refines."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentloop.outcome import FailureKind

if TYPE_CHECKING:
    from agentloop.tasks.results import TaskFailureReason, TaskOutput, TaskResult


class PipelineError(ValueError):
    """The systems given to an `AgentLoop` do not form a valid pipeline."""


class MissingComponentError(LookupError):
    """A system required a component that no earlier system wrote."""

    def __init__(self, component: type, system: str | None) -> None:
        who = f"system {system!r}" if system else "the caller"
        super().__init__(
            f"{who} requires a {component.__name__} component, but none is on the turn "
            f"context; make an earlier system write it or declare it as a turn input"
        )
        self.component = component
        self.system = system


class UndeclaredAccessError(TypeError):
    """A running system touched a component type its declaration does not name.

    Declarations are what build-time validation and `describe()` see, so an access
    outside them would make the pipeline that runs differ from the one described.
    """

    def __init__(self, system: str, component: type, *, write: bool) -> None:
        if write:
            did, fix = "writes", "writes"
        else:
            did, fix = "reads", "reads (or optional_reads, when it may be absent)"
        super().__init__(
            f"system {system!r} {did} {component.__name__} but does not declare it; "
            f"declare {component.__name__} in {fix}"
        )
        self.system = system
        self.component = component
        self.write = write


class LlmCallError(RuntimeError):
    """An LLM call failed; `kind` says how, and drives the finish reason and fallback.

    `partial_text` is the answer's text the model had streamed before a stream broke ("" if
    none): `collect` (so every adapter's `complete`) fills it in, for a caller that wants to
    show or log how far the model got.
    """

    def __init__(self, message: str, *, kind: FailureKind, retryable: bool = False, partial_text: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable
        self.partial_text = partial_text


class TransportError(ConnectionError):
    """A channel could not deliver a response; the message is safe to show a user."""


class ToolDefinitionError(TypeError):
    """A function cannot be turned into a tool (a parameter type has no JSON schema)."""


class ToolArgumentError(ValueError):
    """A model called a tool with arguments that do not match its schema."""


class IndexFileError(ValueError):
    """A saved vector index file is truncated, corrupt or of another dimension."""

    def __init__(self, message: str) -> None:
        super().__init__(
            f"{message}; delete it or open it with HnswVectorIndex.open_or_rebuild, "
            f"which rebuilds it from the source of truth"
        )


class NewerSchemaError(ValueError):
    """A database was written by a newer agentloop whose schema this one does not know."""

    def __init__(self, path: str, store: str, found: int, known: int) -> None:
        super().__init__(
            f"{path or 'the database'} holds the {store} schema at version {found}, newer than version {known} "
            f"that this agentloop knows; upgrade agentloop to open it (it was left unchanged)"
        )
        self.path = path
        self.store = store
        self.found = found
        self.known = known


class EmbedderMismatchError(ValueError):
    """A store's vectors were made by another embedder than the one it is opened with;
    vectors of two embedders cannot be compared."""

    def __init__(self, where: str, recorded: str, given: str) -> None:
        super().__init__(
            f"{where} was embedded by {recorded!r}, but it is opened with the embedder {given!r}; "
            f"open it with {recorded!r}, or re-embed it with the new one: "
            f"agentloop stores reembed URL --bot BOT --embedder SPEC"
        )
        self.where = where
        self.recorded = recorded
        self.given = given


class TemplateError(ValueError):
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


class UnknownTemplateError(LookupError):
    """No template of that name is registered."""

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        listing = ", ".join(known) or "none"
        super().__init__(f"no task template named {name!r} is registered (registered: {listing})")
        self.name = name


class InvalidTaskId(ValueError):
    """A task id that could escape the notes directory or name nothing."""

    def __init__(self, task_id: str) -> None:
        super().__init__(
            f"task id {task_id!r} is not allowed: use 1-128 letters, digits, '.', '_' or '-', "
            f"starting with a letter or digit, with no path separators and no '..'"
        )
        self.task_id = task_id


class InvalidTaskTransition(ValueError):
    """A task lifecycle move that its current state does not allow."""

    def __init__(self, task_id: str, current: str, target: str, allowed_from: tuple[str, ...]) -> None:
        super().__init__(
            f"task {task_id!r} is {current}, so it cannot move to {target}; "
            f"that needs one of: {', '.join(allowed_from)}"
        )
        self.task_id = task_id
        self.current = current
        self.target = target


class ClaimLostError(ValueError):
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


class UnknownTaskError(LookupError):
    """No task with that id is in the task store."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"no task with id {task_id!r}; create it first")
        self.task_id = task_id


class TaskError(RuntimeError):
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


class EndpointUnreachableError(ConnectionError):
    """Nothing answers HTTP at a model server's base URL (refused, unknown host, timed out)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach the model server at {url} ({reason}); start it or check the base URL")
        self.url = url
        self.reason = reason


class ModelServerError(LlmCallError):
    """A model server answered with an HTTP error; `status` is its code and `retry_after`
    the seconds it asked to wait (Retry-After), if it said."""

    def __init__(
        self, message: str, *, status: int, kind: FailureKind, retryable: bool = False, retry_after: float | None = None
    ) -> None:
        super().__init__(message, kind=kind, retryable=retryable)
        self.status = status
        self.retry_after = retry_after


class UnknownModelError(LookupError):
    """A model server lists the models it serves, and the one asked for is not among them."""

    def __init__(self, url: str, model: str, served: tuple[str, ...]) -> None:
        shown = ", ".join(served[:10]) + (f" and {len(served) - 10} more" if len(served) > 10 else "")
        super().__init__(
            f"the model server at {url} does not serve a model named {model!r} (it serves: {shown or 'none'}); "
            f"pass one of those as the model name"
        )
        self.url = url
        self.model = model
        self.served = served


class InvalidTransition(ValueError):
    """A knowledge item was asked to move to a lifecycle status its status does not allow."""

    def __init__(self, note_id: int | None, current: object, target: object, allowed: object) -> None:
        super().__init__(
            f"note {note_id} cannot go from {current} to {target}; from {current} it may go to {allowed}"
        )
        self.note_id = note_id
        self.current = current
        self.target = target


class RecorderClosedError(RuntimeError):
    """A tool execution was handed to a trajectory recorder that was already closed."""


class CaptureDrainError(RuntimeError):
    """Shutdown could not write every captured tool execution; they are still pending."""


class ExecutionRefusedError(ValueError):
    """A trajectory store refuses one tool execution for what it holds (too large, a value
    it cannot encode); writing it again will not help, so capture quarantines it."""


class DistillationError(ValueError):
    """The model's distillation reply is not a valid note (a required section is missing)."""


class UnknownNoteError(LookupError):
    """No knowledge item has the given id in this repository."""

    def __init__(self, note_id: int) -> None:
        super().__init__(f"there is no knowledge item with id {note_id}; it was never stored here")
        self.note_id = note_id


class DemoCheckFailed(RuntimeError):
    """A step of `agentloop demo` did not behave as the demo expects; says which and how."""


class StoreUrlError(ValueError):
    """A stores URL names no backend this release has, or a place its stores cannot live."""

    def __init__(self, url: str, problem: str, fix: str) -> None:
        super().__init__(f"cannot open the stores at {url}: {problem}; {fix}")
        self.url = url


class StoreError(RuntimeError):
    """A store's database failed while answering a call (a lost connection, a full disk, a
    damaged file); every backend raises it, with the driver's own error as its cause."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(
            f"{where} failed: {reason}; check that the database is reachable, has room and is not damaged, then try again"
        )
        self.where = where
        self.reason = reason


class StoreUnavailableError(StoreError):
    """A store's database could not be reached (the server is down, restarting or cut off):
    the call did not happen, or is not known to have happened, and may be made again later.

    `retry_after` is the number of seconds a caller is advised to wait before trying again
    (what an HTTP server puts in `Retry-After`).
    """

    def __init__(self, where: str, reason: str, *, retry_after: int = 5) -> None:
        super().__init__(where, reason)
        self.retry_after = retry_after
