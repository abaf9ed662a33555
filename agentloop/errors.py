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
