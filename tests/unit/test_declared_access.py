"""Checked access: while a system runs, it touches only the component types it declares."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop import (
    AgentContext,
    AgentLoop,
    FailureKind,
    FailureSource,
    IncomingMessage,
    LlmCallError,
    PipelineError,
    Session,
    System,
    UndeclaredAccessError,
    tool,
)
from agentloop.adapters import open_note_taking
from agentloop.notes import KnowledgeItem, Layer, NoteTaking, NoteType
from agentloop.tasks import TaskTurn
from agentloop.testing import (
    FakeClock,
    RecordingChannel,
    ScriptedLLM,
    make_context,
    make_system,
    run_pipeline,
    run_system,
    run_system_sync,
)
from systems import (
    ContextBuildingSystem,
    MemoryPersistSystem,
    NoteRetrievalSystem,
    ResponseRoutingSystem,
    StandardPipeline,
    ToolLoopSystem,
    add_note_taking,
    standard_pipeline,
)


@attrs.frozen
class Draft:
    text: str


@attrs.frozen
class Review:
    ok: bool


def _only_failure(ctx: AgentContext) -> str:
    (failure,) = ctx.failures
    assert failure.source is FailureSource.SYSTEM and failure.kind is FailureKind.VALIDATION
    return failure.message


def test_reading_an_undeclared_type_is_a_validation_failure_that_names_system_type_and_fix() -> None:
    snoop = make_system("Snoop", 20, lambda ctx: ctx.get(Draft) and None)
    ctx = run_pipeline([make_system("Drafter", 10, lambda ctx: ctx.set(Draft("x")), writes=(Draft,)), snoop])
    message = _only_failure(ctx)
    assert "UndeclaredAccessError" in message and "'Snoop'" in message
    assert "declare Draft in reads (or optional_reads" in message


@pytest.mark.parametrize("action", [lambda ctx: ctx.set(Review(True)), lambda ctx: ctx.remove(Review)])
def test_writing_or_removing_an_undeclared_type_is_refused_and_lands_nothing(action: object) -> None:
    ctx = run_pipeline([make_system("Sneak", 10, action, reads=(Review,))], components=[Review(False)])  # type: ignore[arg-type]
    assert "declare Review in writes" in _only_failure(ctx)
    assert ctx.get(Review) == Review(False)


@pytest.mark.parametrize("check", ["get", "require", "has"])
def test_every_read_method_is_checked(check: str) -> None:
    ctx = run_pipeline([make_system("Peek", 10, lambda ctx: getattr(ctx, check)(Draft) and None)], components=[Draft("x")])
    assert "Draft" in _only_failure(ctx)


def test_should_process_is_held_to_the_declaration_too() -> None:
    class Picky(System):
        order = 10

        def should_process(self, ctx: AgentContext) -> bool:
            return ctx.has(Draft)

        def process(self, ctx: AgentContext) -> None:
            pass

    assert "'Picky'" in _only_failure(run_pipeline([Picky()]))


def test_declared_reads_optional_reads_writes_and_the_turn_inputs_are_open() -> None:
    seen: list[object] = []

    def touch(ctx: AgentContext) -> None:
        seen.extend([ctx.require(Session).id, ctx.require(IncomingMessage).text, ctx.get(Draft), ctx.get(Review)])
        ctx.set(Review(True))
        seen.append(ctx.require(Review))

    ctx = run_pipeline(
        [make_system("Reviewer", 10, touch, reads=(Draft,), optional_reads=(Review,), writes=(Review,))],
        "hi", session=Session("s1"), components=[Draft("d")],
    )
    assert ctx.failures == ()
    assert seen == ["s1", "hi", Draft("d"), None, Review(True)]


def test_outside_a_running_system_every_type_is_open() -> None:
    ctx = run_pipeline([make_system("Quiet", 10)])
    ctx.set(Draft("after the turn"))
    assert ctx.require(Draft) == Draft("after the turn") and ctx.components()[-1] == Draft("after the turn")
    loose = make_context(components=[Review(True)])
    assert loose.has(Review) and loose.get(Review) == Review(True)


def test_run_system_checks_like_the_loop_and_lifts_the_check_afterwards() -> None:
    ctx = make_context(components=[Draft("x")])
    with pytest.raises(UndeclaredAccessError, match="system 'Snoop' reads Draft"):
        run_system_sync(make_system("Snoop", 10, lambda c: c.get(Draft) and None), ctx)
    assert ctx.get(Draft) == Draft("x") and ctx.current_system is None


def test_a_running_system_has_no_public_way_to_lift_its_own_check() -> None:
    """The context had a public `run_as(None)`, with which a system could read anything."""
    seen: list[object] = []

    def lift_then_read(ctx: AgentContext) -> None:
        ctx.run_as(None)  # type: ignore[attr-defined]
        seen.append(ctx.get(Draft))

    ctx = run_pipeline([make_system("Snoop", 10, lift_then_read)], components=[Draft("secret")])
    assert seen == [] and len(ctx.failures) == 1


def test_run_system_restores_the_check_of_the_system_that_ran_it() -> None:
    """A system running another through `run_system` is held to its own declaration again afterwards."""
    inner = make_system("Inner", 10, lambda ctx: None)
    seen: list[object] = []

    async def outer_process(ctx: AgentContext) -> None:
        await run_system(inner, ctx)
        seen.append(ctx.get(Draft))

    ctx = run_pipeline([make_system("Outer", 10, outer_process)], components=[Draft("secret")])
    assert seen == [] and "system 'Outer' reads Draft" in _only_failure(ctx)
    assert ctx.current_system is None and ctx.get(Draft) == Draft("secret")


def test_a_running_system_lists_only_the_components_it_may_read() -> None:
    listed: list[tuple[object, ...]] = []
    run_pipeline(
        [make_system("Lister", 10, lambda ctx: listed.append(ctx.components()), reads=(Draft,))],
        components=[Draft("x"), Review(True)],
    )
    assert [type(c) for c in listed[0]] == [Session, IncomingMessage, Draft]


def test_an_optional_read_written_only_later_is_an_ordering_mistake() -> None:
    with pytest.raises(PipelineError, match="Early .order 10. reads Draft, which is written only by Late .order 20."):
        AgentLoop([make_system("Early", 10, optional_reads=(Draft,)), make_system("Late", 20, writes=(Draft,))])


def test_an_optional_read_from_an_earlier_writer_a_turn_input_or_nobody_builds() -> None:
    AgentLoop([make_system("Writer", 10, writes=(Draft,)), make_system("Reader", 20, optional_reads=(Draft,))])
    AgentLoop([make_system("Reader", 10, optional_reads=(Draft,)), make_system("W", 20, writes=(Draft,))], inputs=(Draft,))
    AgentLoop([make_system("Reader", 10, optional_reads=(Review,))])


def test_optional_reads_must_be_a_tuple_of_types() -> None:
    with pytest.raises(PipelineError, match="`optional_reads` must be a tuple of types"):
        AgentLoop([make_system("Bad", 10, optional_reads=[Draft])])  # type: ignore[arg-type]


def test_describe_marks_optional_reads_and_draws_their_arrows() -> None:
    loop = AgentLoop([make_system("Writer", 10, writes=(Draft,)), make_system("Reader", 20, reads=(Review,), optional_reads=(Draft,))])
    text = loop.describe().to_text()
    assert "Review, Draft?" in text
    assert "s0 -. Draft .-> s1" in loop.describe().to_mermaid()


# --- the standard pipeline with note-taking keeps to its declarations ------------------


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


@tool
def explode() -> str:
    """Always fails."""
    raise RuntimeError("boom")


STEPS = st.one_of(
    st.text(max_size=12),
    st.sampled_from([("lookup", {"q": "rate limits"}), ("lookup", {"q": 3}), ("explode", {}), ("send_voice", {"text": "hi"})])
    .map(lambda call: ScriptedLLM.tool_call(*call)),
    st.sampled_from(FailureKind).map(lambda kind: LlmCallError(f"scripted {kind.value}", kind=kind)),
)


@attrs.frozen
class Turn:
    kind: str  # "user", "auto", "task", "fresh-task"
    text: str
    script: tuple[object, ...]
    fault_at: int | None
    channel_fails: bool


TURNS = st.builds(
    Turn,
    kind=st.sampled_from(["user", "auto", "task", "fresh-task"]),
    text=st.sampled_from(["how do I page a rate-limited API?", "hello", " "]),
    script=st.lists(STEPS, max_size=4).map(tuple),
    fault_at=st.one_of(st.none(), st.sampled_from([5, 15, 22, 27, 45, 58, 65, 72, 77, 90])),
    channel_fails=st.booleans(),
)
SESSION = Session("s1", user_id="u1", project_id="p1", team_id="t1", org_id="o1")
NOTE = "## Context\nExports fail on bursts.\n\n## Solution\nPage through rate-limited APIs.\n\n## Tags\nexport\n"


@pytest.fixture(scope="module")
def note_taking(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NoteTaking]:
    opened = open_note_taking(tmp_path_factory.mktemp("notes"), ScriptedLLM(), clock=FakeClock())
    item = KnowledgeItem(
        NoteType.PATTERN, Layer.PROJECT, opened.chain(SESSION), "Paging", NOTE, opened.knowledge.embed(NOTE), FakeClock().now()
    )
    asyncio.run(opened.knowledge.add(item))
    yield opened
    opened.close()


def _raiser(order: int) -> System:
    def boom(ctx: AgentContext) -> None:
        raise RuntimeError(f"fault at {order}")

    return make_system(f"Fault{order}", order, boom)


def _turn(pipeline: StandardPipeline, loop: AgentLoop, turn: Turn) -> AgentContext:
    pipeline_llm = pipeline.get(ToolLoopSystem).llm
    assert isinstance(pipeline_llm, ScriptedLLM)
    pipeline_llm.add(*turn.script)  # type: ignore[arg-type]
    channel = pipeline.get(ResponseRoutingSystem).channel
    assert isinstance(channel, RecordingChannel)
    channel.recover()
    if turn.channel_fails:
        channel.fail_with()
    if turn.kind in ("task", "fresh-task"):
        task = TaskTurn("export", turn.text, fresh_context=turn.kind == "fresh-task")
        return loop.run_turn_sync(SESSION, IncomingMessage(task.render(), auto_mode=True), components=[task, task.policy])
    return loop.run_turn_sync(SESSION, IncomingMessage(turn.text, auto_mode=turn.kind == "auto"))


@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(TURNS, min_size=1, max_size=4))
def test_every_access_of_the_standard_pipeline_is_within_its_declaration(
    note_taking: NoteTaking, tmp_path_factory: pytest.TempPathFactory, turns: list[Turn]
) -> None:
    """Declared access (checked access; not one of I1-I14): over user turns, auto turns,
    task turns with their TurnPolicy, model and tool errors, failing deliveries and
    systems that raise, no system ever touches an undeclared type, not even one whose
    error something caught."""
    undeclared: list[str] = []
    refuse = AgentContext._undeclared

    def record(ctx: AgentContext, component_type: type, *, write: bool) -> UndeclaredAccessError:
        error = refuse(ctx, component_type, write=write)
        undeclared.append(str(error))
        return error

    data_dir = tmp_path_factory.mktemp("bot")
    with standard_pipeline(ScriptedLLM(), RecordingChannel(), data_dir=data_dir, tools=[lookup, explode]) as pipeline:
        add_note_taking(pipeline, note_taking)
        for order in {t.fault_at for t in turns if t.fault_at is not None}:
            pipeline.insert(_raiser(order))
        loop = pipeline.build(inputs=(TaskTurn,))
        with mock.patch.object(AgentContext, "_undeclared", record):
            finished = [_turn(pipeline, loop, turn) for turn in turns]
    assert undeclared == []
    for ctx in finished:
        assert [f for f in ctx.failures if f.kind is FailureKind.VALIDATION and f.source is FailureSource.SYSTEM] == []


@pytest.mark.parametrize("reader", [ContextBuildingSystem, NoteRetrievalSystem, MemoryPersistSystem])
def test_a_system_that_forgets_to_declare_what_it_reads_is_caught_on_any_turn(
    note_taking: NoteTaking, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: type[System]
) -> None:
    monkeypatch.setattr(reader, "optional_reads", ())  # the drift this check exists for
    with standard_pipeline(ScriptedLLM(["Sure."]), RecordingChannel(), data_dir=tmp_path) as pipeline:
        add_note_taking(pipeline, note_taking)
        ctx = pipeline.build().run_turn_sync(SESSION, IncomingMessage("hello"))  # a user turn: no TurnPolicy on it
    (failure,) = [f for f in ctx.failures if f.component == reader.__name__]
    assert failure.kind is FailureKind.VALIDATION
    assert f"system '{reader.__name__}' reads TurnPolicy but does not declare it" in failure.message
