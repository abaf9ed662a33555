"""The built-in systems of agentloop, one module per concern; subclass them to build bots."""

from systems.context import ContextBuildingSystem
from systems.feedback import FeedbackGuaranteeSystem
from systems.input import InputSanitizationSystem
from systems.memory import MemoryPersistSystem
from systems.notes import NoteRetrievalSystem, TrajectoryCaptureSystem, add_note_taking
from systems.outcome import TurnOutcomeFinalizationSystem
from systems.rag import RagIndexingSystem
from systems.routing import ResponseRoutingSystem
from systems.standard import StandardOptions, StandardPipeline, release_budgets, standard_pipeline
from systems.usage import UsageRecordingSystem
from systems.tool_loop import ToolExecutionHook, ToolLoopSettings, ToolLoopSystem, ToolPolicy, plan_mode_requested, send_voice

__all__ = [
    "ContextBuildingSystem",
    "FeedbackGuaranteeSystem",
    "InputSanitizationSystem",
    "MemoryPersistSystem",
    "NoteRetrievalSystem",
    "RagIndexingSystem",
    "ResponseRoutingSystem",
    "StandardOptions",
    "StandardPipeline",
    "ToolExecutionHook",
    "ToolLoopSettings",
    "ToolLoopSystem",
    "ToolPolicy",
    "TrajectoryCaptureSystem",
    "TurnOutcomeFinalizationSystem",
    "UsageRecordingSystem",
    "add_note_taking",
    "plan_mode_requested",
    "release_budgets",
    "send_voice",
    "standard_pipeline",
]
