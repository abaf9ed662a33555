"""The base of every exception agentloop raises, and the errors of the core (the loop, the
context, tools, models, channels and stores).

Each error subclasses `AgentloopError` and the builtin it refines, so `except AgentloopError`
catches anything the library raises on purpose and `except ValueError` still works. The
errors of a package sit beside it: `agentloop.adapters.errors`, `agentloop.notes.errors`,
`agentloop.tasks.errors`, `agentloop.workers.errors`, `agentloop.serve.errors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentloop._deprecated import renamed_names
from agentloop.outcome import FailureKind


class AgentloopError(Exception):
    """The base of every error agentloop raises; each also subclasses the builtin it matches."""


class PipelineError(ValueError, AgentloopError):
    """The systems given to an `AgentLoop` do not form a valid pipeline."""


class MissingComponentError(LookupError, AgentloopError):
    """A system required a component that no earlier system wrote."""

    def __init__(self, component: type, system: str | None) -> None:
        who = f"system {system!r}" if system else "the caller"
        super().__init__(
            f"{who} requires a {component.__name__} component, but none is on the turn "
            f"context; make an earlier system write it or declare it as a turn input"
        )
        self.component = component
        self.system = system


class UndeclaredAccessError(TypeError, AgentloopError):
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


class LlmCallError(RuntimeError, AgentloopError):
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


class TurnInProgressError(RuntimeError, AgentloopError):
    """A message arrived while a turn of its session was still running, and the bot's mid-turn
    policy is `reject`: it was not run."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"a turn of session {session_id!r} is still running, so this message was not taken (the mid-turn policy "
            f"is reject); send it again once the running turn has answered"
        )
        self.session_id = session_id


class TransportError(ConnectionError, AgentloopError):
    """A channel could not deliver a response; the message is safe to show a user."""


class ToolDefinitionError(TypeError, AgentloopError):
    """A function cannot be turned into a tool (a parameter type has no JSON schema)."""


class ToolArgumentError(ValueError, AgentloopError):
    """A model called a tool with arguments that do not match its schema."""


class EndpointUnreachableError(ConnectionError, AgentloopError):
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


class UnknownModelError(LookupError, AgentloopError):
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


class ApiKeyRefusedError(PermissionError, AgentloopError):
    """A model server refused the API key (HTTP 401 or 403) when asked for its models before a conversation."""

    def __init__(self, url: str, status: int) -> None:
        super().__init__(f"the model server refused the API key (GET {url} answered HTTP {status})")
        self.url = url
        self.status = status


class ApiPathError(LookupError, AgentloopError):
    """A model server has no model listing at the base URL (HTTP 404): the base URL's path is wrong."""

    def __init__(self, url: str) -> None:
        super().__init__(f"no such API path; the base URL usually ends in /v1 (GET {url} answered HTTP 404)")
        self.url = url


class DemoCheckError(RuntimeError, AgentloopError):
    """A step of `agentloop demo` did not behave as the demo expects; says which and how."""


class LogLevelError(ValueError, AgentloopError):
    """`configure_logging` was given a level that is not DEBUG, INFO, WARNING or ERROR."""


class StoreError(RuntimeError, AgentloopError):
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

if not TYPE_CHECKING:  # type checkers report the old names, which is the point
    __getattr__ = renamed_names(
        __name__,
        {
            "DemoCheckFailed": "agentloop.errors.DemoCheckError",
            "InvalidTaskId": "agentloop.tasks.errors.InvalidTaskIdError",
            "InvalidTaskTransition": "agentloop.tasks.errors.InvalidTaskTransitionError",
            "InvalidTransition": "agentloop.notes.errors.InvalidNoteTransitionError",
        },
    )
