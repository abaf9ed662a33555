"""Exceptions raised by agentloop; each subclasses the builtin it refines."""

from __future__ import annotations


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


class LlmCallError(RuntimeError):
    """An LLM call failed; `kind` says how (a `FailureKind`)."""

    def __init__(self, message: str, *, kind: object, retryable: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable


class TransportError(ConnectionError):
    """A channel could not deliver a response; the message is safe to show a user."""


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


class DistillationError(ValueError):
    """The model's distillation reply is not a valid note (a required section is missing)."""


class UnknownNoteError(LookupError):
    """No knowledge item has the given id in this repository."""

    def __init__(self, note_id: int) -> None:
        super().__init__(f"there is no knowledge item with id {note_id}; it was never stored here")
        self.note_id = note_id
