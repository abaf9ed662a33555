"""Real implementations of the ports, one subpackage per backend or provider; the embedded
ones work offline on a fresh machine.

The names below load their backend on first use, so importing one adapter (the scripted
model, the recording channel) does not open SQLite's or hnswlib's modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentloop.adapters.channels.console import ConsoleChannel
    from agentloop.adapters.embedders.hashing import HashingEmbedder
    from agentloop.adapters.embedders.wordllama import WordLlamaEmbedder
    from agentloop.adapters.llm.fallback import FallbackLLM
    from agentloop.adapters.metrics import InMemoryMetrics
    from agentloop.adapters.notes import open_note_taking
    from agentloop.adapters.notifier import LogNotifier, RecordingNotifier
    from agentloop.adapters.sqlite.attempt_notes import FileAttemptNotes
    from agentloop.adapters.sqlite.knowledge import SqliteKnowledgeRepository
    from agentloop.adapters.sqlite.memory import SqliteMemoryStore
    from agentloop.adapters.sqlite.rag import SqliteRagStore
    from agentloop.adapters.sqlite.sessions import SqliteSessionStore
    from agentloop.adapters.sqlite.tasks import SqliteTaskStore
    from agentloop.adapters.sqlite.trajectories import SqliteTrajectoryStore
    from agentloop.adapters.stores import DEFAULT_STORES_URL, Reembedded, default_embedder, open_stores, reembed_stores, stores_exist
    from agentloop.adapters.summaries import InMemorySummaryStore
    from agentloop.adapters.vectors.hnsw import HnswVectorIndex
    from agentloop.ports.stores import Stores

_HOMES = {
    "ConsoleChannel": "agentloop.adapters.channels.console",
    "DEFAULT_STORES_URL": "agentloop.adapters.stores",
    "FallbackLLM": "agentloop.adapters.llm.fallback",
    "FileAttemptNotes": "agentloop.adapters.sqlite.attempt_notes",
    "HashingEmbedder": "agentloop.adapters.embedders.hashing",
    "HnswVectorIndex": "agentloop.adapters.vectors.hnsw",
    "InMemoryMetrics": "agentloop.adapters.metrics",
    "InMemorySummaryStore": "agentloop.adapters.summaries",
    "LogNotifier": "agentloop.adapters.notifier",
    "RecordingNotifier": "agentloop.adapters.notifier",
    "Reembedded": "agentloop.adapters.stores",
    "SqliteKnowledgeRepository": "agentloop.adapters.sqlite.knowledge",
    "SqliteMemoryStore": "agentloop.adapters.sqlite.memory",
    "SqliteRagStore": "agentloop.adapters.sqlite.rag",
    "SqliteSessionStore": "agentloop.adapters.sqlite.sessions",
    "SqliteTaskStore": "agentloop.adapters.sqlite.tasks",
    "SqliteTrajectoryStore": "agentloop.adapters.sqlite.trajectories",
    "Stores": "agentloop.ports.stores",
    "WordLlamaEmbedder": "agentloop.adapters.embedders.wordllama",
    "default_embedder": "agentloop.adapters.stores",
    "open_note_taking": "agentloop.adapters.notes",
    "open_stores": "agentloop.adapters.stores",
    "reembed_stores": "agentloop.adapters.stores",
    "stores_exist": "agentloop.adapters.stores",
}

__all__ = [
    "DEFAULT_STORES_URL",
    "ConsoleChannel",
    "FallbackLLM",
    "FileAttemptNotes",
    "HashingEmbedder",
    "HnswVectorIndex",
    "InMemoryMetrics",
    "InMemorySummaryStore",
    "LogNotifier",
    "RecordingNotifier",
    "Reembedded",
    "SqliteKnowledgeRepository",
    "SqliteMemoryStore",
    "SqliteRagStore",
    "SqliteSessionStore",
    "SqliteTaskStore",
    "SqliteTrajectoryStore",
    "Stores",
    "WordLlamaEmbedder",
    "default_embedder",
    "open_note_taking",
    "open_stores",
    "reembed_stores",
    "stores_exist",
]


def __getattr__(name: str) -> Any:
    """Import the module that defines `name` the first time it is asked for."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'agentloop.adapters' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
