"""The ports: Protocols the framework and systems depend on, never a concrete adapter."""

from agentloop.ports.approvals import ApprovalStore
from agentloop.ports.attempt_notes import AttemptNotesStore
from agentloop.ports.channel import Channel, MessageStream, StreamingChannel
from agentloop.ports.clock import Clock, SystemClock
from agentloop.ports.knowledge import KnowledgeRepository, MaintainerNotifier
from agentloop.ports.llm import LLM, StreamingLLM
from agentloop.ports.metrics import Metrics
from agentloop.ports.tasks import TaskRecord, TaskState, TaskStore
from agentloop.ports.telemetry import AttributeValue, Span, Tracer
from agentloop.ports.trajectories import TrajectoryStore
from agentloop.ports.vectors import Embedder, VectorIndex, Vectors

__all__ = ["LLM", "Channel", "Clock", "Embedder", "Metrics", "SystemClock", "VectorIndex", "Vectors"]
__all__ += ["KnowledgeRepository", "MaintainerNotifier", "TrajectoryStore"]
__all__ += ["ApprovalStore", "AttemptNotesStore", "TaskRecord", "TaskState", "TaskStore"]
__all__ += ["AttributeValue", "Span", "Tracer"]

from agentloop.ports.stores import MemoryEntry, MemoryStore, RagHit, RagStore, SessionStore, Stores  # noqa: E402

__all__ += ["MemoryEntry", "MemoryStore", "RagHit", "RagStore", "SessionStore", "Stores"]
__all__ += ["MessageStream", "StreamingChannel", "StreamingLLM"]

from agentloop.ports.inbox import DeliveryLedger  # noqa: E402

__all__ += ["DeliveryLedger"]
