"""Embedded implementations of the ports; they work offline on a fresh machine."""

from agentloop.adapters.attempt_notes_files import FileAttemptNotes
from agentloop.adapters.hashing_embedder import HashingEmbedder
from agentloop.adapters.hnsw_index import HnswVectorIndex
from agentloop.adapters.metrics import InMemoryMetrics
from agentloop.adapters.notes import open_note_taking
from agentloop.adapters.notifier import LogNotifier, RecordingNotifier
from agentloop.adapters.sqlite_knowledge import SqliteKnowledgeRepository
from agentloop.adapters.sqlite_tasks import SqliteTaskStore
from agentloop.adapters.sqlite_trajectories import SqliteTrajectoryStore

__all__ = ["FileAttemptNotes", "InMemoryMetrics"]
__all__ += ["LogNotifier", "RecordingNotifier", "SqliteKnowledgeRepository", "SqliteTrajectoryStore", "open_note_taking"]
__all__ += ["HashingEmbedder", "HnswVectorIndex"]
__all__ += ["SqliteTaskStore"]

from agentloop.adapters.console import ConsoleChannel  # noqa: E402
from agentloop.adapters.sqlite_memory import SqliteMemoryStore  # noqa: E402
from agentloop.adapters.sqlite_rag import SqliteRagStore  # noqa: E402
from agentloop.adapters.sqlite_sessions import SqliteSessionStore  # noqa: E402

__all__ += ["ConsoleChannel", "SqliteMemoryStore", "SqliteRagStore", "SqliteSessionStore"]
from agentloop.adapters.stores import DEFAULT_STORES_URL, Reembedded, open_stores, reembed_stores, stores_exist  # noqa: E402
from agentloop.ports.stores import Stores  # noqa: E402

__all__ += ["DEFAULT_STORES_URL", "Reembedded", "Stores", "open_stores", "reembed_stores", "stores_exist"]
