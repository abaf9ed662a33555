"""Embedded implementations of the ports; they work offline on a fresh machine."""

from agentloop.adapters.metrics import InMemoryMetrics
from agentloop.adapters.hashing_embedder import HashingEmbedder
from agentloop.adapters.hnsw_index import HnswVectorIndex
from agentloop.adapters.sqlite_tasks import SqliteTaskStore

__all__ = ["InMemoryMetrics"]
__all__ += ["HashingEmbedder", "HnswVectorIndex"]
__all__ += ["SqliteTaskStore"]
