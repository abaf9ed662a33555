"""Steps for note_taking.feature: real SQLite stores, a real hnswlib index, the hashing
embedder, and a fake clock; the model is a small distilling stand-in for an LLM."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
from pytest_bdd import given, parsers, scenarios, then, when
from structlog.testing import capture_logs

from agentloop import AgentContext, LlmRequest, PromptContext, Scope, Session, System, ToolExecution, history_scope
from agentloop.adapters import InMemoryMetrics, RecordingNotifier, Stores, open_stores
from agentloop.errors import LlmCallError
from agentloop.notes.errors import InvalidNoteTransitionError
from agentloop.notes import (
    SECTIONS,
    CaptureSettings,
    DistillationResult,
    Distiller,
    KnowledgeBase,
    KnowledgeItem,
    Layer,
    LayerIds,
    NoteStatus,
    NoteTaking,
    NoteType,
    NoticeKind,
    RetrievedNote,
    TrajectoryRecorder,
)
from agentloop.outcome import FailureKind
from agentloop.ports import Embedder, KnowledgeRepository, TrajectoryStore
from agentloop.testing import FakeClock, PromptWriter, run_pipeline
from agentloop.adapters.llm.scripted import ScriptedLLM
from agentloop.testing.notes import FlakyTrajectoryStore
from systems.notes import NOTES_SECTION_TITLE, add_note_taking

scenarios("note_taking.feature")

NOTE_REPLY = """## Context
Fetching release notes failed intermittently because the docs server drops connections.

## Solution
Search the docs first, read the matching file, then run the tests to confirm the fix.

## Key Patterns
- Retry flaky network calls with exponential backoff.
- Confirm a fix by running the tests before answering.

## Code Examples
```python
for delay in (1, 2, 4):
    try:
        return fetch()
    except ConnectionError:
        time.sleep(delay)
```

## Tags
networking, retries, testing
"""

TOOLS = ("search_docs", "read_file", "run_tests", "edit_file", "deploy")


class DistillingModel(ScriptedLLM):
    """Answers every distillation request with the same note; fails for chosen tickets."""

    def __init__(self) -> None:
        self.failing_tickets: set[str] = set()
        super().__init__(self._reply, model="note-writer-1")

    def _reply(self, request: LlmRequest) -> str | BaseException:
        body = request.messages[-1].content or ""
        if any(f'"ticket": "{ticket}"' in body for ticket in self.failing_tickets):
            return LlmCallError("the model is overloaded", kind=FailureKind.RATE_LIMIT)
        return NOTE_REPLY


class GatedStore:
    """Passes writes through to a real store, or holds each write until `release()`."""

    def __init__(self, inner: TrajectoryStore) -> None:
        self.inner = inner
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    async def append(self, executions: Sequence[ToolExecution]) -> None:
        if self.gate is not None:
            self.entered.set()
            self.gate.wait()
        await self.inner.append(executions)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@attrs.define
class World:
    tmp: Path
    clock: FakeClock
    metrics: InMemoryMetrics
    notifier: RecordingNotifier
    stores: Stores
    trajectories: TrajectoryStore
    gated: GatedStore
    flaky: FlakyTrajectoryStore
    recorder: TrajectoryRecorder
    embedder: Embedder
    repository: KnowledgeRepository
    knowledge: KnowledgeBase
    llm: DistillingModel
    note_taking: NoteTaking
    sessions: dict[str, Session] = attrs.Factory(dict)
    results: dict[str, DistillationResult] = attrs.Factory(dict)
    notes: dict[str, KnowledgeItem] = attrs.Factory(dict)
    found: list[RetrievedNote] = attrs.Factory(list)
    picks: list[str] = attrs.Factory(list)
    handoffs: list[tuple[bool, bool]] = attrs.Factory(list)
    kept: list[bool] = attrs.Factory(list)
    turn: AgentContext | None = None
    stored_note: KnowledgeItem | None = None
    sessions_made: int = 0

    def session(self, session_id: str) -> Session:
        """A session by id; unknown ones join the chain of session s1 as user u1."""
        if session_id not in self.sessions:
            base = self.sessions.get("s1", Session("s1", "u1", "p1", "t1", "o1"))
            self.sessions[session_id] = attrs.evolve(base, id=session_id)
        return self.sessions[session_id]

    def scope(self, session_id: str) -> Scope:
        """The session's whole chain, as retrievals record it."""
        return history_scope(self.session(session_id), self.note_taking.company_id)

    def execution(self, tool: str, session_id: str, *, index: int = 0, **fields: Any) -> ToolExecution:
        session = self.session(session_id)
        values: dict[str, Any] = {
            "id": f"{session_id}-{tool}-{index}-{self.clock.monotonic()}",
            "tool_name": tool,
            "arguments": {"ticket": session_id, "step": index},
            "started_at": self.clock.now(),
            "duration_ms": 250.0,
            "session_id": session_id,
            "result": f"{tool} done",
            "user_id": session.user_id,
            "project_id": session.project_id,
            "org_id": session.org_id,
            "team_id": session.team_id,
            "context_snapshot": {"user_message": f"please fix ticket {session_id}"},
        }
        values.update(fields)
        return ToolExecution(**values)

    def capture(self, execution: ToolExecution) -> bool:
        self.note_taking.observe_session(self.session(execution.session_id))
        return self.recorder.enqueue(execution)

    def add_note(self, title: str, text: str, layer: Layer, ids: LayerIds) -> KnowledgeItem:
        item = KnowledgeItem(
            NoteType.PATTERN, layer, ids.truncated(layer), title, text, self.knowledge.embed(text), self.clock.now()
        )
        stored = asyncio.run(self.knowledge.add(item))
        self.notes[title] = stored
        return stored

    def note(self, title: str) -> KnowledgeItem:
        return asyncio.run(self.repository.get(self.notes[title].key))

    def ask(self, session_id: str, question: str) -> AgentContext:
        systems: list[System] = [PromptWriter()]
        add_note_taking(systems, self.note_taking)
        self.turn = run_pipeline(systems, question, session=self.session(session_id), clock=self.clock)
        return self.turn


@pytest.fixture
def logs() -> Iterator[list[dict[str, Any]]]:
    with capture_logs() as captured:
        yield captured


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    clock = FakeClock()
    metrics = InMemoryMetrics()
    notifier = RecordingNotifier()
    stores = open_stores(tmp_path)
    trajectories = stores.trajectories
    gated = GatedStore(trajectories)
    flaky = FlakyTrajectoryStore(gated)
    recorder = TrajectoryRecorder(
        flaky, settings=CaptureSettings(batch_size=10), clock=clock, metrics=metrics, rng=random.Random(1)
    )
    embedder, repository = stores.embedder, stores.knowledge
    knowledge = KnowledgeBase(repository, embedder, notifier=notifier, clock=clock, metrics=metrics)
    llm = DistillingModel()
    distiller = Distiller(llm, knowledge, trajectories, clock=clock, metrics=metrics)
    note_taking = NoteTaking(recorder, distiller, knowledge)
    yield World(
        tmp_path, clock, metrics, notifier, stores, trajectories, gated, flaky, recorder, embedder, repository, knowledge,
        llm, note_taking,
    )
    if gated.gate is not None:
        gated.gate.set()
    flaky.failing = False
    recorder.close()
    stores.close()


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


# -- given -------------------------------------------------------------------------------


@given("a note-taking setup on a fake clock")
def setup(world: World, logs: list[dict[str, Any]]) -> None:
    assert world.repository is not None and logs is not None


@given(parsers.parse('session "{sid}" of user "{user}" in project "{project}" of team "{team}" in org "{org}"'))
def a_session(world: World, sid: str, user: str, project: str, team: str, org: str) -> None:
    world.sessions[sid] = Session(sid, user_id=user, project_id=project, team_id=team, org_id=org)


@given(parsers.re(r'session "(?P<sid>[^"]+)"(?: of the same project)? ran (?P<count>\d+) tools over (?P<seconds>\d+) seconds(?P<fails> and the model will fail on it)?'))
def session_ran_tools(world: World, sid: str, count: str, seconds: str, fails: str | None) -> None:
    n, total = int(count), float(seconds)
    start = world.clock.now()
    gap = (total - 1.0) / (n - 1) if n > 1 else 0.0
    for index in range(n):
        started = start + timedelta(seconds=index * gap)
        duration = 1000.0 if n > 1 else total * 1000.0
        world.capture(world.execution(TOOLS[index % len(TOOLS)], sid, index=index, started_at=started, duration_ms=duration))
    world.clock.advance(total)
    if fails:
        world.llm.failing_tickets.add(sid)


@given(parsers.parse('session "{sid}" ended successfully'))
def session_ended(world: World, sid: str) -> None:
    end_session(world, sid)


@given(parsers.parse("these notes in the project of session \"{sid}\":"))
def project_notes(world: World, sid: str, datatable: list[list[str]]) -> None:
    chain = world.note_taking.chain(world.session(sid))
    for title, text in datatable[1:]:
        world.add_note(title.strip(), text.strip(), Layer.PROJECT, chain)


@given(parsers.re(
    r'the note "(?P<text>[^"]+)" at layer "(?P<layer>\w+)"'
    r'(?: of project "(?P<project>\w+)")?(?: of team "(?P<team>\w+)")?(?: (?:of|in) org "(?P<org>\w+)")?$'
))
def scoped_note(world: World, text: str, layer: str, project: str | None, team: str | None, org: str | None) -> None:
    ids = LayerIds(org_id=org, team_id=team, project_id=project)
    world.add_note(f"{layer} {project or team or org or 'company'}", text, Layer(layer), ids)


@given("the trajectory store blocks every write until it is released")
def blocking_store(world: World) -> None:
    world.gated.gate = threading.Event()


@given("the background writer is running")
def writer_running(world: World) -> None:
    world.recorder.start()


# -- when --------------------------------------------------------------------------------


@when(parsers.parse('the agent runs these tools in session "{sid}":'))
def run_tool_table(world: World, sid: str, datatable: list[list[str]]) -> None:
    ids: dict[str, str] = {}
    for index, (tool, parent, after) in enumerate(row for row in datatable[1:]):
        world.clock.advance(float(after) - (float(datatable[index][2]) if index else 0.0))
        execution = world.execution(tool.strip(), sid, index=index, parent_id=ids.get(parent.strip()))
        ids[execution.tool_name] = execution.id
        world.capture(execution)


@when(parsers.parse(
    "the agent runs \"{tool}\" with arguments '{arguments}' in session \"{sid}\" and it fails with \"{error}\""
))
def run_failing_tool(world: World, tool: str, arguments: str, sid: str, error: str) -> None:
    world.capture(world.execution(tool, sid, arguments=json.loads(arguments), result=None, error=error))


@when("the capture buffer is flushed")
def flush(world: World) -> None:
    world.recorder.flush()


@when(parsers.parse('the agent runs {count:d} tools in session "{sid}"'))
def run_tools(world: World, count: int, sid: str) -> None:
    for index in range(count):
        accepted = world.capture(world.execution("search_docs", sid, index=len(world.handoffs)))
        world.handoffs.append((accepted, world.gated.gate is None or not world.gated.gate.is_set()))


@when("the background writer wakes")
def writer_wakes(world: World) -> None:
    world.recorder.tick()


@when(parsers.parse("{seconds:d} seconds pass and the background writer wakes"))
def time_passes(world: World, seconds: int) -> None:
    world.clock.advance(seconds)
    world.recorder.tick()


@when("the trajectory store starts failing")
def store_fails(world: World) -> None:
    world.flaky.failing = True


@when("the trajectory store recovers")
def store_recovers(world: World) -> None:
    world.flaky.failing = False


@when("the store is released and capture shuts down")
def release_and_close(world: World) -> None:
    assert world.gated.gate is not None
    world.gated.gate.set()
    world.recorder.close()


@when(parsers.parse('session "{sid}" ends successfully'))
def end_session(world: World, sid: str) -> None:
    world.results[sid] = asyncio.run(world.note_taking.end_session(sid, success=True))
    if world.results[sid].note is not None:
        world.stored_note = world.results[sid].note


@when(parsers.parse('sessions "{sids}" end successfully'))
def end_sessions(world: World, sids: str) -> None:
    for sid in _names(sids):
        end_session(world, sid)


@when(parsers.parse('session "{sid}" searches notes for "{query}" with k {k:d} above {threshold:g}'))
def search_k(world: World, sid: str, query: str, k: int, threshold: float) -> None:
    chain = world.note_taking.chain(world.session(sid))
    world.found = asyncio.run(world.knowledge.retrieve(query, chain, session=world.scope(sid), k=k, min_similarity=threshold))


@when(parsers.parse('session "{sid}" searches notes for "{query}" at layer "{layer}"'))
def search_layer(world: World, sid: str, query: str, layer: str) -> None:
    chain = world.note_taking.chain(world.session(sid))
    world.found = asyncio.run(world.knowledge.retrieve(query, chain, session=world.scope(sid), layer=Layer(layer)))


@when(parsers.parse('session "{sid}" of the same project asks the bot "{question}"'))
def ask_bot(world: World, sid: str, question: str) -> None:
    world.session(sid)
    world.ask(sid, question)


@when(parsers.parse('the user gives positive feedback on session "{sid}"'))
def positive_feedback(world: World, sid: str) -> None:
    asyncio.run(world.note_taking.record_feedback(world.session(sid), positive=True))


@when(parsers.parse('session "{sid}" retrieves the best note for "{query}" {times:d} times'))
def retrieve_best(world: World, sid: str, query: str, times: int) -> None:
    chain = world.note_taking.chain(world.session(sid))
    for _ in range(times):
        world.picks.append(asyncio.run(world.knowledge.retrieve(query, chain, session=world.scope(sid), k=1))[0].item.title)


@when(parsers.parse('the notes "{titles}" are proposed and accepted'))
def accept_notes(world: World, titles: str) -> None:
    for title in _names(titles):
        asyncio.run(world.knowledge.transition(world.notes[title].key, NoteStatus.PROPOSED))
        asyncio.run(world.knowledge.transition(world.notes[title].key, NoteStatus.ACCEPTED))


@when(parsers.re(r'the stored note moves to (?P<targets>.+)'))
def move_stored(world: World, targets: str) -> None:
    assert world.stored_note is not None
    for target in _names(targets.replace('"', "")):
        asyncio.run(world.knowledge.transition(world.stored_note.key, NoteStatus(target)))


@when(parsers.re(r'(?P<count>\d+) (?:more )?sessions? (?:each )?asks? the bot "(?P<question>[^"]+)" and gives? positive feedback'))
def sessions_ask_and_like(world: World, count: str, question: str) -> None:
    for _ in range(int(count)):
        world.sessions_made += 1
        sid = f"fan-{world.sessions_made}"
        world.session(sid)
        world.ask(sid, question)
        asyncio.run(world.note_taking.record_feedback(world.session(sid), positive=True))


@when(parsers.parse('session "{sid}" runs {count:d} successful tools within a minute'))
def busy_session(world: World, sid: str, count: int) -> None:
    world.kept = []
    for index in range(count):
        world.kept.append(world.capture(world.execution("poll", sid, index=index)))
        world.clock.advance(0.5)


@when(parsers.parse('session "{sid}" runs {ok:d} successful and {failing:d} failing tools within the same minute'))
def busier_session(world: World, sid: str, ok: int, failing: int) -> None:
    world.kept = []
    every = ok // failing
    for index in range(ok + failing):
        fails = index % (every + 1) == every
        execution = world.execution("poll", sid, index=1000 + index, error="timeout" if fails else None)
        world.kept.append(world.capture(execution))


# -- then --------------------------------------------------------------------------------


@then(parsers.parse('the trajectory of session "{sid}" lists "{tools}" in that order'))
def trajectory_lists(world: World, sid: str, tools: str) -> None:
    assert [e.tool_name for e in asyncio.run(world.trajectories.load(sid)).executions] == _names(tools)


@then(parsers.parse('"{child}" is recorded as a child of "{parent}"'))
def child_of(world: World, child: str, parent: str) -> None:
    by_name = {e.tool_name: e for e in asyncio.run(world.trajectories.load("s1")).executions}
    assert by_name[child].parent_id == by_name[parent].id
    assert all(e.parent_id is None for name, e in by_name.items() if name != child)


@then("every recorded execution has its arguments, result, start time and duration")
def complete_records(world: World) -> None:
    executions = asyncio.run(world.trajectories.load("s1")).executions
    assert executions and all(e.arguments and e.result and e.duration_ms > 0 for e in executions)
    starts = [e.started_at for e in executions]
    assert starts == sorted(starts) and starts[-1] - starts[0] == timedelta(seconds=20)


@then(parsers.parse('every recorded execution belongs to session "{sid}" and user "{user}"'))
def belongs_to(world: World, sid: str, user: str) -> None:
    executions = asyncio.run(world.trajectories.load(sid)).executions
    assert executions and all(e.session_id == sid and e.user_id == user and e.project_id == "p1" for e in executions)


@then(parsers.parse("the recorded \"{tool}\" execution has arguments '{arguments}' and error \"{error}\""))
def recorded_failure(world: World, tool: str, arguments: str, error: str) -> None:
    (execution,) = [e for e in asyncio.run(world.trajectories.load("s1")).executions if e.tool_name == tool]
    assert execution.arguments == json.loads(arguments)
    assert execution.error == error and execution.result is None and not execution.succeeded


@then(parsers.parse('the recorded "{tool}" execution has a context snapshot with the user\'s message'))
def recorded_snapshot(world: World, tool: str) -> None:
    (execution,) = [e for e in asyncio.run(world.trajectories.load("s1")).executions if e.tool_name == tool]
    assert execution.context_snapshot == {"user_message": "please fix ticket s1"}


@then(parsers.parse('the trajectory of session "{sid}" has the same content hash after reopening the store'))
def stable_hash(world: World, sid: str) -> None:
    before = asyncio.run(world.trajectories.load(sid)).content_hash
    with open_stores(world.tmp) as reopened:
        assert asyncio.run(reopened.trajectories.load(sid)).content_hash == before and len(before) == 64


@then(parsers.parse('the model was asked once to analyse the trajectory of session "{sid}"'))
def model_asked(world: World, sid: str) -> None:
    (request,) = world.llm.requests
    body = request.messages[-1].content or ""
    assert f'"ticket": "{sid}"' in body
    assert all(tool in body for tool in TOOLS[:3])


@then(parsers.parse('distillation of session "{sid}" reports "{status}"'))
def distillation_reports(world: World, sid: str, status: str) -> None:
    assert world.results[sid].status.value == status, world.results[sid].reason


@then(parsers.parse('the stored note has the sections "{sections}"'))
def note_sections(world: World, sections: str) -> None:
    assert world.stored_note is not None
    for section in _names(sections):
        assert f"## {section}\n" in world.stored_note.markdown
    assert world.stored_note.title.startswith("Fetching release notes failed")


@then("the distillation prompt asks for these sections:")
def prompt_sections(world: World, datatable: list[list[str]]) -> None:
    system = world.llm.requests[0].messages[0].content or ""
    for heading, question in datatable[1:]:
        assert f"{heading.strip()}\n{question.strip()}" in system
    assert [f"## {title}" for title, _ in SECTIONS] == [row[0].strip() for row in datatable[1:]]


@then(parsers.parse("the distillation prompt shows the {count:d} tool executions"))
def prompt_steps(world: World, count: int) -> None:
    body = world.llm.requests[0].messages[-1].content or ""
    assert body.count("### Step ") == count


@then("the model was not called")
def model_not_called(world: World) -> None:
    assert world.llm.requests == []


@then("no note is stored")
def no_note(world: World) -> None:
    assert asyncio.run(world.repository.count()) == 0


@then(parsers.parse('the log says distillation was skipped because "{reason}"'))
def skip_logged(logs: list[dict[str, Any]], reason: str) -> None:
    assert any(e["event"] == "distillation.skipped" and reason in e["reason"] for e in logs), logs


@then(parsers.parse('the stored note has type "{kind}", status "{status}" and layer "{layer}"'))
def note_kind(world: World, kind: str, status: str, layer: str) -> None:
    note = world.stored_note
    assert note is not None
    assert (note.type.value, note.status.value, note.layer.value) == (kind, status, layer)


@then(parsers.parse('the stored note is owned by project "{project}" of team "{team}" in org "{org}"'))
def note_owner(world: World, project: str, team: str, org: str) -> None:
    assert world.stored_note is not None
    assert world.stored_note.layer_ids == LayerIds("default", org, team, project)


@then(parsers.parse('the stored note\'s metadata cites the trajectory of session "{sid}"'))
def note_cites(world: World, sid: str) -> None:
    assert world.stored_note is not None and world.stored_note.metadata is not None
    trajectory = asyncio.run(world.trajectories.load(sid))
    assert world.stored_note.metadata.source_trajectory_id == trajectory.content_hash
    assert asyncio.run(world.trajectories.is_distilled(trajectory.distilled_key(world.stored_note.layer_ids)))


@then("the stored note's metadata has source_trajectory_id, distillation_timestamp and llm_model_used")
def metadata_source(world: World) -> None:
    assert world.stored_note is not None and world.stored_note.metadata is not None
    metadata = asyncio.run(world.repository.get(world.stored_note.key)).metadata
    assert metadata is not None
    assert len(metadata.source_trajectory_id) == 64
    assert metadata.distillation_timestamp == world.clock.now()
    assert metadata.llm_model_used == "note-writer-1"
    assert metadata.tags == ("networking", "retries", "testing")


@then(parsers.parse('the stored note\'s metadata has session "{sid}", user "{user}" and project "{project}"'))
def metadata_ids(world: World, sid: str, user: str, project: str) -> None:
    assert world.stored_note is not None and world.stored_note.metadata is not None
    metadata = world.stored_note.metadata
    assert (metadata.session_id, metadata.user_id, metadata.project_id) == (sid, user, project)


@then("the stored note's embedding is the embedding of its markdown")
def note_embedding(world: World) -> None:
    assert world.stored_note is not None
    stored = asyncio.run(world.repository.get(world.stored_note.key))
    assert np.allclose(stored.embedding, world.embedder.embed([stored.markdown])[0])


@then(parsers.parse('the results are "{titles}" in that order'))
def results_in_order(world: World, titles: str) -> None:
    assert [r.item.title for r in world.found] == _names(titles)


@then(parsers.parse("every result is at least {threshold:g} similar to the query"))
def results_above(world: World, threshold: float) -> None:
    assert world.found and all(r.similarity >= threshold for r in world.found)


@then(parsers.parse('the results come from the layers "{layers}" in that order'))
def results_layers(world: World, layers: str) -> None:
    assert [r.item.layer.value for r in world.found] == _names(layers)
    assert all(r.item.layer_ids.org_id in (None, "o1") for r in world.found)
    assert all(r.item.layer_ids.project_id in (None, "p1") for r in world.found)


@then(parsers.parse('the prompt context of that turn includes the note "{title}"'))
def prompt_has_note(world: World, title: str) -> None:
    assert world.turn is not None
    prompt = world.turn.require(PromptContext)
    (section,) = [s for s in prompt.sections if s.title == NOTES_SECTION_TITLE]
    assert f"### {title}\n" in section.body
    assert f"### {title}\n" in prompt.render_system()


@then(parsers.re(r'the note "(?P<title>[^"]+)" has been retrieved (?P<times>\d+) times?'))
def retrieved_times(world: World, title: str, times: str) -> None:
    assert world.note(title).retrieval_count == int(times)


@then(parsers.parse('its retrieval is recorded with the query "{query}" and session "{sid}"'))
def retrieval_recorded(world: World, query: str, sid: str) -> None:
    (retrieval,) = asyncio.run(world.repository.retrievals(next(iter(world.notes.values())).key))
    assert (retrieval.query, retrieval.session_id, retrieval.at) == (query, sid, world.clock.now())


@then(parsers.parse('the note "{title}" has usefulness score {score:d}'))
def usefulness(world: World, title: str, score: int) -> None:
    assert world.note(title).usefulness_score == score


@then(parsers.parse('the note "{title}" is flagged for review'))
def flagged(world: World, title: str) -> None:
    assert world.picks == [title] * len(world.picks)
    assert world.note(title).flagged_for_review


@then(parsers.parse('a maintainer was told that "{title}" was {what}'))
def maintainer_told(world: World, title: str, what: str) -> None:
    kind = {"flagged": NoticeKind.NOTE_FLAGGED, "proposed": NoticeKind.NOTE_PROPOSED}[what]
    assert [n.note_ids for n in world.notifier.notices if n.kind is kind] == [(world.notes[title].key,)]


@then(parsers.parse('the best note for "{query}" is now "{title}"'))
def best_note(world: World, query: str, title: str) -> None:
    chain = world.note_taking.chain(world.session("s1"))
    assert asyncio.run(world.knowledge.search(query, chain, k=1))[0].item.title == title


@then(parsers.parse("there is {count:d} note stored"))
def notes_stored(world: World, count: int) -> None:
    assert asyncio.run(world.repository.count()) == count


@then(parsers.parse('the note distilled from session "{sid}" has reference count {count:d}'))
def reference_count(world: World, sid: str, count: int) -> None:
    note = world.results[sid].note
    assert note is not None
    assert asyncio.run(world.repository.get(note.key)).reference_count == count


@then("the log says a duplicate was detected")
def duplicate_logged(logs: list[dict[str, Any]]) -> None:
    assert any(e["event"] == "distillation.duplicate" and e["similarity"] > 0.95 for e in logs)


@then(parsers.parse('a merge of "{first}" and "{second}" is suggested to a maintainer'))
def merge_suggested(world: World, first: str, second: str) -> None:
    pair = tuple(sorted((world.notes[first].key, world.notes[second].key)))
    (suggestion,) = asyncio.run(world.knowledge.merge_suggestions())
    assert (suggestion.first_id, suggestion.second_id) == pair and suggestion.similarity > 0.9
    assert [n.note_ids for n in world.notifier.notices if n.kind is NoticeKind.MERGE_SUGGESTED] == [pair]


@then(parsers.parse('no merge with "{title}" is suggested'))
def no_merge_with(world: World, title: str) -> None:
    key = world.notes[title].key
    assert all(key not in (s.first_id, s.second_id) for s in asyncio.run(world.knowledge.merge_suggestions()))


@then(parsers.parse('the notes "{titles}" are all still stored unchanged'))
def stored_unchanged(world: World, titles: str) -> None:
    for title in _names(titles):
        original, now = world.notes[title], world.note(title)
        assert (now.title, now.markdown, now.layer_ids) == (original.title, original.markdown, original.layer_ids)
        assert np.array_equal(now.embedding, original.embedding)


@then(parsers.parse('the stored note has status "{status}"'))
def stored_status(world: World, status: str) -> None:
    assert world.stored_note is not None
    assert asyncio.run(world.repository.get(world.stored_note.key)).status.value == status


@then(parsers.parse('moving the stored note to "{status}" is refused as an invalid transition'))
def refused(world: World, status: str) -> None:
    assert world.stored_note is not None
    with pytest.raises(InvalidNoteTransitionError, match="cannot go from deprecated"):
        asyncio.run(world.knowledge.transition(world.stored_note.key, NoteStatus(status)))


@then("a draft note can be rejected but a rejected note cannot be proposed")
def reject_draft(world: World) -> None:
    chain = world.note_taking.chain(world.session("s1"))
    note = world.add_note("Half-baked idea", "an idea nobody tried", Layer.PROJECT, chain)
    assert asyncio.run(world.knowledge.transition(note.key, NoteStatus.REJECTED)).status is NoteStatus.REJECTED
    with pytest.raises(InvalidNoteTransitionError):
        asyncio.run(world.knowledge.transition(note.key, NoteStatus.PROPOSED))


@then(parsers.parse('the note "{title}" has status "{status}"'))
def note_status(world: World, title: str, status: str) -> None:
    assert world.note(title).status.value == status


@then(parsers.parse('the counter "{name}" with status "{status}" is {value:d}'))
def counter(world: World, name: str, status: str, value: int) -> None:
    assert world.metrics.counter(name, {"status": status}) == value


@then(parsers.parse('the histogram "{name}" has {count:d} observations'))
def histogram_count(world: World, name: str, count: int) -> None:
    assert len(world.metrics.observations(name)) == count


@then(parsers.parse('the histogram "{name}" recorded {value:g}'))
def histogram_value(world: World, name: str, value: float) -> None:
    assert value in world.metrics.observations(name)


@then("every hand-off returned while the store was still blocked")
def handoffs_returned(world: World) -> None:
    assert world.gated.entered.wait(5.0), "the writer never started a batch write"
    assert world.handoffs and all(accepted and blocked for accepted, blocked in world.handoffs)
    assert world.gated.gate is not None and not world.gated.gate.is_set()


@then("the executions wait in the buffer for a batch write")
def waiting(world: World) -> None:
    assert asyncio.run(world.trajectories.count()) == 0
    assert world.recorder.stats.pending == len(world.handoffs)


@then(parsers.parse('the trajectory of session "{sid}" holds {count:d} executions'))
def trajectory_holds(world: World, sid: str, count: int) -> None:
    assert len(asyncio.run(world.trajectories.load(sid)).executions) == count


@then(parsers.parse("{count:d} executions are stored"))
def stored_count(world: World, count: int) -> None:
    assert asyncio.run(world.trajectories.count()) == count


@then(parsers.parse("{count:d} executions wait in the retry queue"))
def retry_queue(world: World, count: int) -> None:
    stats = world.recorder.stats
    assert stats.pending == count and stats.failed_flushes >= 1


@then(parsers.parse("all {count:d} executions are kept"))
def all_kept(world: World, count: int) -> None:
    assert world.kept == [True] * count


@then(parsers.parse('the log says sampling is active for session "{sid}"'))
def sampling_logged(world: World, logs: list[dict[str, Any]], sid: str) -> None:
    assert world.recorder.sampling_active(sid)
    assert any(e["event"] == "capture.sampling" and e["session_id"] == sid and e["active"] for e in logs)


@then(parsers.parse("all {count:d} failing executions are kept"))
def failing_kept(world: World, count: int) -> None:
    stored = world.recorder.stats.accepted
    world.recorder.flush()
    failed = [e for e in asyncio.run(world.trajectories.load("busy")).executions if e.error is not None]
    assert len(failed) == count and stored == asyncio.run(world.trajectories.count())


@then(parsers.parse("between {low:d}% and {high:d}% of the {count:d} successful executions are kept"))
def sampled_share(world: World, low: int, high: int, count: int) -> None:
    ok = [e for e in asyncio.run(world.trajectories.load("busy")).executions if e.error is None and e.arguments["step"] >= 1000]
    assert count * low / 100 <= len(ok) <= count * high / 100


@then("the executions sampled out are counted")
def sampled_counted(world: World) -> None:
    stats = world.recorder.stats
    assert stats.sampled_out == world.kept.count(False) > 0
