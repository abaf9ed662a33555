"""The Tracer port: spans around a turn, its systems, model calls and tool calls."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

AttributeValue = str | bool | int | float


@runtime_checkable
class Span(Protocol):
    def set_attribute(self, key: str, value: AttributeValue) -> None:
        """Attach `key=value` to the span."""
        ...

    def fail(self, description: str) -> None:
        """Mark the span as failed, saying why."""
        ...

    def end(self) -> None:
        """End the span and make its parent the current span again."""
        ...


@runtime_checkable
class Tracer(Protocol):
    def start_span(self, name: str, attributes: Mapping[str, AttributeValue]) -> Span:
        """Start a child of the current span (of this task) and make it current until it ends."""
        ...
