"""Embedded implementations of the ports; they work offline on a fresh machine."""

from agentloop.adapters.metrics import InMemoryMetrics
from agentloop.adapters.sqlite_tasks import SqliteTaskStore

__all__ = ["InMemoryMetrics"]
__all__ += ["SqliteTaskStore"]
