"""systems/notes.py: note retrieval into the prompt, turn capture, add_note_taking, and a
bot that learns from one session and is helped by the note in the next."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentloop import (
    AgentContext,
    AgentLoop,
    ChatMessage,
    IncomingMessage,
    LlmReply,
    LlmRequest,
    LlmResponse,
    PromptContext,
    Session,
    System,
    ToolCall,
    ToolExecution,
    ToolExecutions,
)
from agentloop.adapters import open_note_taking
from agentloop.notes import DistillationStatus, Layer, LayerIds, NoteTaking, RetrievedNotes
from agentloop.testing import FakeClock, run_pipeline
from agentloop.testing.notes import make_execution
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


class PromptWriter(System):
    """Stands in for context building: the system prompt and the user's message."""

    order = 20
    writes = (PromptContext,)

    def process(self, ctx: AgentContext) -> None:
        ctx.set(PromptContext("You are a data assistant.", (ChatMessage.user(ctx.incoming.text),)))


class ToolRunner(System):
    """A minimal tool loop: ask the model, run the tools it calls, repeat until it answers.

    Each finished tool is handed to `on_tool_execution` and the turn's executions are
    written as `ToolExecutions`, the contract of the standard tool loop.
    """

    order = 30
    reads = (PromptContext,)
    writes = (ToolExecutions, LlmResponse)

    def __init__(self, llm: object, tools: dict[str, Callable[..., str]], clock: FakeClock) -> None:
        self.llm = llm
        self.tools = tools
        self.clock = clock
        self.on_tool_execution: Callable[[ToolExecution], object] | None = None

    async def process(self, ctx: AgentContext) -> None:
        messages = list(ctx.require(PromptContext).to_messages())
        executions: list[ToolExecution] = []
        while True:
            reply: LlmReply = await self.llm.complete(LlmRequest(tuple(messages)))  # type: ignore[attr-defined]
            if not reply.tool_calls:
                ctx.set(LlmResponse(reply.content or ""))
                return
            messages.append(ChatMessage.assistant(reply.content, reply.tool_calls))
            for call in reply.tool_calls:
                started, t0 = self.clock.now(), self.clock.monotonic()
                result = self.tools[call.name](**call.arguments)
                execution = ToolExecution(
                    id=uuid.uuid4().hex, tool_name=call.name, arguments=dict(call.arguments), started_at=started,
                    duration_ms=(self.clock.monotonic() - t0) * 1000.0, session_id=ctx.session.id, result=result,
                    parent_id=executions[-1].id if executions else None, user_id=ctx.session.user_id,
                    project_id=ctx.session.project_id, context_snapshot={"user_message": ctx.incoming.text},
                )
                executions.append(execution)
                ctx.set(ToolExecutions(tuple(executions)))
                if self.on_tool_execution is not None:
                    self.on_tool_execution(execution)
                messages.append(ChatMessage.tool(call.id, call.name, result))


class ScriptModel:
    """Replies from a script; distillation requests get the note."""

    def __init__(self, *replies: LlmReply) -> None:
        self.replies = list(replies)
        self.requests: list[LlmRequest] = []

    async def complete(self, request: LlmRequest) -> LlmReply:
        self.requests.append(request)
        if "distill" in (request.messages[0].content or ""):
            return LlmReply(NOTE, model="scripted")
        return self.replies.pop(0)


def _call(name: str, **arguments: object) -> LlmReply:
    return LlmReply(tool_calls=(ToolCall(uuid.uuid4().hex, name, dict(arguments)),))


@pytest.fixture
def notes(tmp_path: Path) -> Iterator[NoteTaking]:
    note_taking = open_note_taking(tmp_path, ScriptModel(), clock=FakeClock())
    yield note_taking
    note_taking.close()


SESSION = Session("s1", user_id="u1", project_id="p1", team_id="t1", org_id="o1")


def _seed(notes: NoteTaking, text: str, session: Session = SESSION) -> int:
    from agentloop.notes import KnowledgeItem, NoteType

    chain = notes.chain(session)
    item = KnowledgeItem(NoteType.PATTERN, Layer.PROJECT, chain, text[:20], text, notes.knowledge.embed(text), FakeClock().now())
    return notes.knowledge.add(item).key


def test_retrieval_adds_a_notes_section_and_records_what_the_session_saw(notes: NoteTaking) -> None:
    key = _seed(notes, "page through rate-limited APIs")
    ctx = run_pipeline([PromptWriter(), NoteRetrievalSystem(notes)], "how do I page a rate-limited API?", session=SESSION)
    retrieved = ctx.require(RetrievedNotes)
    assert [r.item.key for r in retrieved.notes] == [key]
    (section,) = ctx.require(PromptContext).sections
    assert section.title == NOTES_SECTION_TITLE and "page through rate-limited APIs" in section.body
    assert [r.session_id for r in notes.knowledge.repository.retrievals(key)] == ["s1"]


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
    runner = ToolRunner(ScriptModel(), {}, FakeClock())
    runner.on_tool_execution = lambda execution: seen.append(execution.id)
    systems = add_note_taking([PromptWriter(), runner], notes)
    assert [type(s).__name__ for s in systems] == ["PromptWriter", "ToolRunner", "NoteRetrievalSystem", "TrajectoryCaptureSystem"]
    assert runner.on_tool_execution is not None
    execution = make_execution("a")
    runner.on_tool_execution(execution)
    assert seen == [execution.id] and notes.recorder.stats.accepted == 1
    AgentLoop(systems)


def test_a_bot_learns_from_one_session_and_the_next_session_gets_the_note(tmp_path: Path) -> None:
    """Three tool calls over 45 simulated seconds, a successful end, a distilled note, and
    a later session with a related question that has the note in its prompt context."""
    clock = FakeClock()

    def fetch_page(page: int) -> str:
        clock.advance(15)
        return f"page {page}: 500 rows"

    def count_rows() -> str:
        clock.advance(15)
        return "1000 rows"

    model = ScriptModel(
        _call("fetch_page", page=1), _call("fetch_page", page=2), _call("count_rows"), LlmReply("Export done: 1000 rows."),
        LlmReply("Page through the API and check the total."),
    )
    tools = {"fetch_page": fetch_page, "count_rows": count_rows}
    with open_note_taking(tmp_path, model, clock=clock) as notes:
        loop = AgentLoop(add_note_taking([PromptWriter(), ToolRunner(model, tools, clock)], notes), clock=clock)
        first = loop.run_turn_sync(SESSION, IncomingMessage("run the nightly export of the orders table"))
        assert first.require(LlmResponse).text == "Export done: 1000 rows."
        assert len(first.require(ToolExecutions).executions) == 3

        result = asyncio.run(notes.end_session("s1", success=True))
        assert result.status is DistillationStatus.STORED, result.reason
        assert result.note is not None and result.note.layer_ids == LayerIds("default", "o1", "t1", "p1")
        trajectory = notes.recorder.store.load("s1")
        assert [e.tool_name for e in trajectory.executions] == ["fetch_page", "fetch_page", "count_rows"]
        assert trajectory.duration_s >= 30

        later = Session("s2", user_id="u2", project_id="p1", team_id="t1", org_id="o1")
        second = loop.run_turn_sync(later, IncomingMessage("the orders export hits the API rate limit, what should I do?"))
        prompt = second.require(PromptContext)
        assert any(s.title == NOTES_SECTION_TITLE and "Page through rate-limited APIs" in s.body for s in prompt.sections)
        assert "Page through rate-limited APIs" in (model.requests[-1].messages[0].content or "")
        assert [r.item.key for r in second.require(RetrievedNotes).notes] == [result.note.key]
