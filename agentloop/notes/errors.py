"""Errors of note-taking: the note lifecycle, capture, distillation and lookups."""

from __future__ import annotations

from agentloop.errors import AgentloopError


class InvalidNoteTransitionError(ValueError, AgentloopError):
    """A knowledge item was asked to move to a lifecycle status its status does not allow."""

    def __init__(self, note_id: int | None, current: object, target: object, allowed: object) -> None:
        super().__init__(
            f"note {note_id} cannot go from {current} to {target}; from {current} it may go to {allowed}"
        )
        self.note_id = note_id
        self.current = current
        self.target = target


class RecorderClosedError(RuntimeError, AgentloopError):
    """A tool execution was handed to a trajectory recorder that was already closed."""


class CaptureDrainError(RuntimeError, AgentloopError):
    """Shutdown could not write every captured tool execution; they are still pending."""


class ExecutionRefusedError(ValueError, AgentloopError):
    """A trajectory store refuses one tool execution for what it holds (too large, a value
    it cannot encode); writing it again will not help, so capture quarantines it."""


class DistillationError(ValueError, AgentloopError):
    """The model's distillation reply is not a valid note (a required section is missing)."""


class UnknownNoteError(LookupError, AgentloopError):
    """No knowledge item has the given id in this repository."""

    def __init__(self, note_id: int) -> None:
        super().__init__(f"there is no knowledge item with id {note_id}; it was never stored here")
        self.note_id = note_id
