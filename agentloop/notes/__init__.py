"""Note-taking: capture tool trajectories, distill them into notes at session
end, and offer the notes back as context in later sessions; unhelpful notes fade out."""

from agentloop.notes.capture import CaptureSettings, CaptureStats, TrajectoryRecorder, quarantine_record
from agentloop.notes.distillation import (
    INSTRUCTIONS,
    SECTIONS,
    DistillationResult,
    DistillationSettings,
    DistillationStatus,
    DistilledNote,
    Distiller,
    build_prompt,
    parse_note,
)
from agentloop.notes.idle import IdleSessions
from agentloop.notes.knowledge import KnowledgeBase, RetrievalSettings
from agentloop.notes.lifecycle import RETRIEVABLE, TRANSITIONS, QualityRules, check_transition
from agentloop.notes.models import (
    KnowledgeItem,
    Layer,
    LayerIds,
    MaintainerNotice,
    MergeSuggestion,
    Note,
    NoteMetadata,
    NoteStatus,
    NoteType,
    NoticeKind,
    Retrieval,
    RetrievedNote,
    RetrievedNotes,
    ToolExecution,
    Trajectory,
    trajectory_hash,
)
from agentloop.notes.service import NoteTaking

__all__ = [
    "INSTRUCTIONS",
    "RETRIEVABLE",
    "SECTIONS",
    "TRANSITIONS",
    "CaptureSettings",
    "CaptureStats",
    "DistillationResult",
    "DistillationSettings",
    "DistillationStatus",
    "DistilledNote",
    "Distiller",
    "IdleSessions",
    "KnowledgeBase",
    "KnowledgeItem",
    "Layer",
    "LayerIds",
    "MaintainerNotice",
    "MergeSuggestion",
    "Note",
    "NoteMetadata",
    "NoteStatus",
    "NoteTaking",
    "NoteType",
    "NoticeKind",
    "QualityRules",
    "Retrieval",
    "RetrievalSettings",
    "RetrievedNote",
    "RetrievedNotes",
    "ToolExecution",
    "Trajectory",
    "TrajectoryRecorder",
    "build_prompt",
    "check_transition",
    "parse_note",
    "quarantine_record",
    "trajectory_hash",
]
