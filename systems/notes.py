"""Note-taking systems: offer notes from earlier sessions as context, capture
the turn's tool executions, and `add_note_taking` to plug both into a pipeline."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import attrs

from agentloop import (
    AgentContext,
    PromptContext,
    PromptSection,
    SanitizedInput,
    System,
    ToolExecution,
    ToolExecutions,
    TurnPolicy,
)
from agentloop.notes import Layer, NoteTaking, RetrievedNote, RetrievedNotes

from systems.input import turn_user_text
from systems.standard import StandardPipeline
from systems.tool_loop import ToolExecutionHook, ToolLoopSystem

NOTES_SECTION_TITLE = "Notes from earlier sessions"


def render_notes(notes: Iterable[RetrievedNote]) -> str:
    """The notes as one Markdown block, each under its title, best first."""
    return "\n\n".join(f"### {r.item.title}\n{r.item.markdown.strip()}" for r in notes)


class NoteRetrievalSystem(System):
    """Adds the notes most similar to the user's message to the prompt context.

    Only notes in the session's own org/team/project chain are offered (I11). The
    retrieval is recorded with the query, session and turn, so positive feedback on the
    turn (or the session) later credits exactly the notes it saw. A turn whose `TurnPolicy` has
    fresh_retrieval=False (a task step without fresh context) gets no notes.
    """

    order = 25
    reads = (PromptContext, SanitizedInput)
    optional_reads = (TurnPolicy,)
    writes = (RetrievedNotes, PromptContext)

    def __init__(self, note_taking: NoteTaking, *, k: int | None = None, layer: Layer | None = None) -> None:
        self.note_taking = note_taking
        self.k = k
        self.layer = layer

    def should_process(self, ctx: AgentContext) -> bool:
        return ctx.has(PromptContext) and TurnPolicy.of(ctx).fresh_retrieval

    async def process(self, ctx: AgentContext) -> None:
        notes = await self.note_taking.retrieve(
            turn_user_text(ctx), ctx.session, turn_id=ctx.turn_id, layer=self.layer, k=self.k
        )
        ctx.set(RetrievedNotes(tuple(notes)))
        if notes:
            section = PromptSection(NOTES_SECTION_TITLE, render_notes(notes), source="notes")
            ctx.set(ctx.require(PromptContext).with_section(section))


class TrajectoryCaptureSystem(System):
    """Hands the turn's tool executions to the trajectory recorder (non-blocking).

    When the tool loop already calls the recorder as each tool finishes, the recorder
    recognises the executions and captures each once. It also tells note-taking which
    session (and so which tenant chain) the trajectory belongs to.
    """

    order = 80
    reads = (ToolExecutions,)

    def __init__(self, note_taking: NoteTaking) -> None:
        self.note_taking = note_taking

    def process(self, ctx: AgentContext) -> None:
        self.note_taking.observe_session(ctx.session)
        executions = ctx.get(ToolExecutions)
        if executions is None:
            return
        capture = self.note_taking.capture
        for execution in executions.executions:
            capture(execution)


P = TypeVar("P", list[System], StandardPipeline)


def add_note_taking(
    pipeline: P, note_taking: NoteTaking, *, k: int | None = None, layer: Layer | None = None
) -> P:
    """Plug note-taking into `pipeline` (a list of systems or a `StandardPipeline`).

    Adds `NoteRetrievalSystem` (25) and `TrajectoryCaptureSystem` (80), and chains
    note-taking's non-blocking `capture` onto every `ToolLoopSystem`'s `on_tool_execution`
    hook so executions are captured the moment each tool finishes. Returns `pipeline`.
    """
    for system in list(pipeline):
        if isinstance(system, ToolLoopSystem):
            hook = _chain(system.settings.on_tool_execution, note_taking.capture)
            system.settings = attrs.evolve(system.settings, on_tool_execution=hook)
    added: tuple[System, ...] = (NoteRetrievalSystem(note_taking, k=k, layer=layer), TrajectoryCaptureSystem(note_taking))
    for system in added:
        if isinstance(pipeline, list):
            pipeline.append(system)
        else:
            pipeline.insert(system)
    return pipeline


def _chain(existing: ToolExecutionHook | None, capture: Callable[[ToolExecution], bool]) -> ToolExecutionHook:
    """A hook that runs `existing` (if any), then hands the execution to capture."""

    def hook(execution: ToolExecution) -> None:
        if existing is not None:
            existing(execution)
        capture(execution)

    return hook
