"""The Metrics port: counters and histograms with string labels."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable


@runtime_checkable
class Metrics(Protocol):
    def increment(self, name: str, value: float = 1.0, labels: Mapping[str, str] | None = None) -> None:
        """Add `value` to counter `name`."""
        ...

    def observe(self, name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        """Record one observation of histogram `name`."""
        ...
