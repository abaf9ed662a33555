"""Embedded implementations of the ports; they work offline on a fresh machine."""

from agentloop.adapters.hashing_embedder import HashingEmbedder
from agentloop.adapters.hnsw_index import HnswVectorIndex
from agentloop.adapters.metrics import InMemoryMetrics
from agentloop.adapters.notes import open_note_taking
from agentloop.adapters.notifier import LogNotifier, RecordingNotifier
from agentloop.adapters.sqlite_knowledge import SqliteKnowledgeRepository
from agentloop.adapters.sqlite_tasks import SqliteTaskStore
from agentloop.adapters.sqlite_trajectories import SqliteTrajectoryStore

__all__ = ["InMemoryMetrics"]
__all__ += ["LogNotifier", "RecordingNotifier", "SqliteKnowledgeRepository", "SqliteTrajectoryStore", "open_note_taking"]
__all__ += ["HashingEmbedder", "HnswVectorIndex"]
__all__ += ["SqliteTaskStore"]
