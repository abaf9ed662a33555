"""The ports: Protocols the framework and systems depend on, never a concrete adapter."""

from agentloop.ports.approvals import ApprovalStore
from agentloop.ports.attempt_notes import AttemptNotesStore
from agentloop.ports.audit import AuditLog
from agentloop.ports.channel import Channel, MessageStream, StreamingChannel
from agentloop.ports.clock import Clock, SystemClock
from agentloop.ports.inbox import DeliveryLedger
from agentloop.ports.knowledge import KnowledgeRepository, MaintainerNotifier
from agentloop.ports.llm import LLM, CheckableLLM, StreamingLLM
from agentloop.ports.metrics import Metrics
from agentloop.ports.stores import MemoryEntry, MemoryStore, RagHit, RagStore, SessionStore, Stores
from agentloop.ports.speech import Synthesizer, Transcriber
from agentloop.ports.summaries import SessionSummary, SummaryStore
from agentloop.ports.tasks import TaskRecord, TaskState, TaskStore
from agentloop.ports.telemetry import AttributeValue, Span, Tracer
from agentloop.ports.trajectories import TrajectoryStore
from agentloop.ports.usage import Charge, Period, RecordedCall, Spent, UsageFilter, UsageGroup, UsageLine, UsageRecord, UsageStore, UsageTotal, period_start
from agentloop.ports.vectors import Embedder, VectorIndex, Vectors
from agentloop.retrieval import HybridWeights

__all__ = [
    "LLM",
    "ApprovalStore",
    "AttemptNotesStore",
    "AttributeValue",
    "AuditLog",
    "Channel",
    "Charge",
    "CheckableLLM",
    "Clock",
    "DeliveryLedger",
    "Embedder",
    "HybridWeights",
    "KnowledgeRepository",
    "MaintainerNotifier",
    "MemoryEntry",
    "MemoryStore",
    "MessageStream",
    "Metrics",
    "Period",
    "RagHit",
    "RagStore",
    "RecordedCall",
    "SessionStore",
    "SessionSummary",
    "Span",
    "Spent",
    "Stores",
    "StreamingChannel",
    "StreamingLLM",
    "SummaryStore",
    "Synthesizer",
    "SystemClock",
    "TaskRecord",
    "TaskState",
    "TaskStore",
    "Tracer",
    "TrajectoryStore",
    "Transcriber",
    "UsageFilter",
    "UsageGroup",
    "UsageLine",
    "UsageRecord",
    "UsageStore",
    "UsageTotal",
    "VectorIndex",
    "Vectors",
    "period_start",
]
