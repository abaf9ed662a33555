"""Embedded implementations of the ports; they work offline on a fresh machine."""

from agentloop.adapters.metrics import InMemoryMetrics
from agentloop.adapters.notifier import LogNotifier, RecordingNotifier
from agentloop.adapters.sqlite_trajectories import SqliteTrajectoryStore

__all__ = ["InMemoryMetrics"]
__all__ += ["LogNotifier", "RecordingNotifier", "SqliteTrajectoryStore"]
