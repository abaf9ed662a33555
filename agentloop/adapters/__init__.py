"""Embedded implementations of the ports; they work offline on a fresh machine."""

from agentloop.adapters.metrics import InMemoryMetrics

__all__ = ["InMemoryMetrics"]
