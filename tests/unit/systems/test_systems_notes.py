"""systems/notes.py: note retrieval into the prompt, turn capture, add_note_taking, and a
bot that learns from one session and is helped by the note in the next."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentloop import AgentContext, AgentLoop, IncomingMessage, PromptContext, Session, System, ToolExecutions, tool
from agentloop.adapters import open_note_taking
from agentloop.notes import DistillationStatus, KnowledgeItem, Layer, LayerIds, NoteTaking, NoteType, RetrievedNotes
from agentloop.tasks import TaskTurn
from agentloop.testing import FakeClock, PromptWriter, run_pipeline
from agentloop.adapters.channels.recording import RecordingChannel
from agentloop.adapters.llm.scripted import ScriptedLLM
from agentloop.testing.notes import make_execution
from systems import StandardPipeline, ToolLoopSettings, ToolLoopSystem, standard_pipeline
from systems.notes import NOTES_SECTION_TITLE, NoteRetrievalSystem, TrajectoryCaptureSystem, add_note_taking

NOTE = """## Context
The nightly export failed because the upstream API rate-limits bursts.

## Solution
Fetch the export in pages, wait between pages, then verify the row count.

## Key Patterns
Page through rate-limited APIs and verify totals at the end.

## Tags
export, rate-limits
"""


@pytest.fixture
def notes(tmp_path: Path) -> Iterator[NoteTaking]:
    note_taking = open_note_taking(tmp_path, ScriptedLLM([NOTE]), clock=FakeClock())
    yield note_taking
    note_taking.close()


SESSION = Session("s1", user_id="u1", project_id="p1", team_id="t1", org_id="o1")


def _seed(notes: NoteTaking, text: str, session: Session = SESSION) -> int:
    chain = notes.chain(session)
    item = KnowledgeItem(NoteType.PATTERN, Layer.PROJECT, chain, text[:20], text, notes.knowledge.embed(text), FakeClock().now())
    return asyncio.run(notes.knowledge.add(item)).key


def test_retrieval_adds_a_notes_section_and_records_what_the_session_saw(notes: NoteTaking) -> None:
    key = _seed(notes, "page through rate-limited APIs")
    ctx = run_pipeline([PromptWriter(), NoteRetrievalSystem(notes)], "how do I page a rate-limited API?", session=SESSION)
    retrieved = ctx.require(RetrievedNotes)
    assert [r.item.key for r in retrieved.notes] == [key]
    (section,) = ctx.require(PromptContext).sections
    assert section.title == NOTES_SECTION_TITLE and "page through rate-limited APIs" in section.body
    assert [r.session_id for r in asyncio.run(notes.knowledge.repository.retrievals(key))] == ["s1"]


def test_feedback_on_a_turn_credits_the_notes_that_turn_was_shown(notes: NoteTaking) -> None:
    paging = _seed(notes, "page through rate-limited APIs")
    backups = _seed(notes, "verify backups by restoring them")
    pipeline = [PromptWriter(), NoteRetrievalSystem(notes, k=1)]
    first = run_pipeline(pipeline, "how do I page a rate-limited API?", session=SESSION)
    second = run_pipeline(pipeline, "how do I verify backups by restoring them?", session=SESSION)
    assert [r.turn_id for r in asyncio.run(notes.knowledge.repository.retrievals(paging))] == [first.turn_id]
    credited = asyncio.run(notes.record_feedback(SESSION, positive=True, turn_id=second.turn_id))
    assert [(i.key, i.usefulness_score) for i in credited] == [(backups, 1)]
    assert asyncio.run(notes.knowledge.get(paging)).usefulness_score == 0


def test_no_matching_note_leaves_the_prompt_alone(notes: NoteTaking) -> None:
    ctx = run_pipeline([PromptWriter(), NoteRetrievalSystem(notes)], "hello", session=SESSION)
    assert ctx.require(RetrievedNotes).notes == () and ctx.require(PromptContext).sections == ()


def test_retrieval_waits_for_a_prompt_context(notes: NoteTaking) -> None:
    ctx = run_pipeline([NoteRetrievalSystem(notes)], "hello", session=SESSION)
    assert not ctx.has(RetrievedNotes) and ctx.failures == ()


def test_other_tenants_notes_never_reach_the_prompt(notes: NoteTaking) -> None:
    """I11 at the system level: a note of another project is not offered."""
    _seed(notes, "page through rate-limited APIs", Session("x", project_id="p2", team_id="t1", org_id="o1"))
    ctx = run_pipeline([PromptWriter(), NoteRetrievalSystem(notes)], "page through rate-limited APIs", session=SESSION)
    assert ctx.require(RetrievedNotes).notes == ()


@pytest.mark.parametrize("fresh", [True, False])
def test_a_task_turn_gets_notes_only_with_fresh_context(notes: NoteTaking, fresh: bool) -> None:
    _seed(notes, "page through rate-limited APIs")
    turn = TaskTurn("export", "page through rate-limited APIs", fresh_context=fresh)
    ctx = run_pipeline(
        [PromptWriter(), NoteRetrievalSystem(notes)], "page through rate-limited APIs", session=SESSION,
        components=[turn.policy],
    )
    assert ctx.has(RetrievedNotes) is fresh
    assert len(ctx.require(PromptContext).sections) == (1 if fresh else 0)


def test_capture_system_enqueues_each_execution_once(notes: NoteTaking) -> None:
    class Executions(System):
        order = 30
        writes = (ToolExecutions,)

        def process(self, ctx: AgentContext) -> None:
            ctx.set(ToolExecutions((make_execution("a", session_id="s1"), make_execution("b", session_id="s1"))))

    systems: list[System] = [Executions(), TrajectoryCaptureSystem(notes)]
    ctx = run_pipeline(systems, "go", session=SESSION)
    for execution in ctx.require(ToolExecutions).executions:
        assert not notes.recorder.enqueue(execution)
    assert notes.recorder.stats.accepted == 2 and notes.recorder.stats.duplicates == 2


def test_add_note_taking_chains_the_hook_and_keeps_the_old_one(notes: NoteTaking) -> None:
    seen: list[str] = []
    runner = ToolLoopSystem(ScriptedLLM(), (), ToolLoopSettings(on_tool_execution=lambda execution: seen.append(execution.id)))
    systems = add_note_taking([PromptWriter(), runner], notes)
    assert [type(s).__name__ for s in systems] == ["PromptWriter", "ToolLoopSystem", "NoteRetrievalSystem", "TrajectoryCaptureSystem"]
    assert runner.settings.on_tool_execution is not None
    execution = make_execution("a")
    runner.settings.on_tool_execution(execution)
    assert seen == [execution.id] and notes.recorder.stats.accepted == 1
    AgentLoop(systems)


def test_add_note_taking_edits_the_standard_pipeline(notes: NoteTaking, tmp_path: Path) -> None:
    pipeline = standard_pipeline(ScriptedLLM(), RecordingChannel(), data_dir=tmp_path / "bot")
    assert add_note_taking(pipeline, notes) is pipeline
    assert NoteRetrievalSystem in pipeline and TrajectoryCaptureSystem in pipeline
    hook = pipeline.get(ToolLoopSystem).settings.on_tool_execution
    assert hook is not None
    execution = make_execution("lint", session_id="s-standard")
    hook(execution)
    assert notes.recorder.stats.accepted == 1 and notes.recorder.drain() == 1
    assert [e.id for e in asyncio.run(notes.recorder.store.load("s-standard")).executions] == [execution.id]
    orders = [(s.order, type(s).__name__) for s in pipeline.systems]
    assert (25, "NoteRetrievalSystem") in orders and orders[-1] == (80, "TrajectoryCaptureSystem")
    pipeline.build()
    pipeline.close()


def test_a_bot_learns_from_one_session_and_the_next_session_gets_the_note(tmp_path: Path) -> None:
    """The standard pipeline with ScriptedLLM: three tool calls over 45 simulated seconds,
    a successful end, a distilled note, and a later session with a related question that
    has the note in its prompt context."""
    clock = FakeClock()

    @tool
    def fetch_page(page: int) -> str:
        """Fetch one page of the orders export."""
        clock.advance(15)
        return f"page {page}: 500 rows"

    @tool
    def count_rows() -> str:
        """Count the exported rows."""
        clock.advance(15)
        return "1000 rows"

    bot = ScriptedLLM([
        ScriptedLLM.tool_call("fetch_page", {"page": 1}),
        ScriptedLLM.tool_call("fetch_page", {"page": 2}),
        ScriptedLLM.tool_call("count_rows"),
        "Export done: 1000 rows.",
        "Page through the API and check the total.",
    ])
    channel = RecordingChannel()
    with open_note_taking(tmp_path / "notes", ScriptedLLM([NOTE], model="distiller"), clock=clock) as notes:
        pipeline: StandardPipeline = standard_pipeline(
            bot, channel, data_dir=tmp_path / "bot", tools=[fetch_page, count_rows], clock=clock
        )
        loop = add_note_taking(pipeline, notes).build()
        first = loop.run_turn_sync(SESSION, IncomingMessage("run the nightly export of the orders table"))
        assert channel.texts[-1] == "Export done: 1000 rows."
        assert len(first.require(ToolExecutions).executions) == 3

        result = asyncio.run(notes.end_session("s1", success=True))
        assert result.status is DistillationStatus.STORED, result.reason
        assert result.note is not None and result.note.layer_ids == LayerIds("default", "o1", "t1", "p1")
        assert result.note.metadata is not None and result.note.metadata.llm_model_used == "distiller"
        trajectory = asyncio.run(notes.recorder.store.load("s1"))
        assert [e.tool_name for e in trajectory.executions] == ["fetch_page", "fetch_page", "count_rows"]
        assert trajectory.duration_s >= 30

        later = Session("s2", user_id="u2", project_id="p1", team_id="t1", org_id="o1")
        second = loop.run_turn_sync(later, IncomingMessage("the orders export hits the API rate limit, what should I do?"))
        prompt = second.require(PromptContext)
        assert any(s.title == NOTES_SECTION_TITLE and "Page through rate-limited APIs" in s.body for s in prompt.sections)
        assert "Page through rate-limited APIs" in (bot.requests[-1].messages[0].content or "")
        assert [r.item.key for r in second.require(RetrievedNotes).notes] == [result.note.key]
        pipeline.close()
