"""Invariants I1-I8 and I14 of the standard pipeline under random scripts (streamed in random chunks, some
streams cut at random points), system faults and channel faults."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop import (
    AgentContext,
    Attachment,
    ChatMessage,
    FailureKind,
    FailureSource,
    FinishReason,
    IncomingMessage,
    LlmCallError,
    LlmFailure,
    LlmReply,
    LlmRequest,
    LlmResponse,
    PlanProposal,
    Session,
    StreamedText,
    System,
    ToolLoopStop,
    TransportError,
    TurnOutcome,
    history_scope,
    knowledge_scope,
    memory_scope,
    resolve_finish_reason,
    tool,
)
from agentloop.adapters import HashingEmbedder, Stores, open_stores
from agentloop.testing import FakeClock, RecordingChannel, ScriptedLLM, make_context, run_system_sync
from agentloop.testing.strategies import turn_outcomes
from systems import (
    ContextBuildingSystem,
    FeedbackGuaranteeSystem,
    InputSanitizationSystem,
    MemoryPersistSystem,
    RagIndexingSystem,
    ResponseRoutingSystem,
    StandardOptions,
    ToolLoopSystem,
    TurnOutcomeFinalizationSystem,
    standard_pipeline,
)

ADVANCE = "advance the clock past the deadline"


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


@tool
def explode() -> str:
    """Always fails."""
    raise RuntimeError("boom")


@tool
def chart() -> Attachment:
    """A chart."""
    return Attachment("chart.png", "image/png", b"png")


@tool(requires_approval=True)
def transfer(amount: int) -> str:
    """Move money; the user approves each call first."""
    return f"moved {amount}"


TOOL_CALLS = [
    ("lookup", {"q": "x"}), ("lookup", {"q": 5}), ("explode", {}), ("chart", {}),
    ("send_voice", {"text": "spoken"}), ("nope", {}), ("transfer", {"amount": 5}),
]
steps = st.one_of(
    st.text(max_size=12),
    st.just(LlmReply(content="")),
    st.sampled_from(TOOL_CALLS).map(lambda c: ScriptedLLM.tool_call(c[0], c[1])),
    st.sampled_from(FailureKind).map(lambda k: LlmCallError(f"scripted {k.value}", kind=k)),
    st.just(RuntimeError("the client library crashed")),
    st.just(ADVANCE),
)
texts_and_calls = st.text(min_size=1, max_size=12) | st.sampled_from(TOOL_CALLS).map(
    lambda c: ScriptedLLM.tool_call(*c, text="On it. ")
)
cut_streams = st.builds(ScriptedLLM.cut, texts_and_calls, after=st.integers(0, 8))
"""A reply whose stream breaks after a random number of its events."""
streamed_steps = texts_and_calls | cut_streams
SABOTAGE = [InputSanitizationSystem, ContextBuildingSystem, ToolLoopSystem, TurnOutcomeFinalizationSystem,
            ResponseRoutingSystem, MemoryPersistSystem, RagIndexingSystem]


@attrs.frozen
class Scenario:
    script: tuple[Any, ...]
    sabotaged: frozenset[type[System]]
    extra_faults: tuple[int, ...]
    channel_fails: tuple[str, ...]
    channel_error: str
    auto_mode: bool
    plan_mode: bool
    text: str
    chunk: int | None


any_scenario = st.builds(
    Scenario,
    script=st.lists(steps | cut_streams, max_size=6).map(tuple),
    sabotaged=st.frozensets(st.sampled_from(SABOTAGE), max_size=2),
    extra_faults=st.lists(st.sampled_from([5, 15, 25, 45, 58, 65, 72, 90]), max_size=2, unique=True).map(tuple),
    channel_fails=st.lists(st.sampled_from(["text", "voice", "attachment"]), unique=True).map(tuple),
    channel_error=st.sampled_from(["transport", "crash"]),
    auto_mode=st.booleans(),
    plan_mode=st.booleans(),
    text=st.text(max_size=30),
    chunk=st.none() | st.integers(1, 5),
)
streaming_scenario = st.builds(
    Scenario,
    script=st.lists(streamed_steps, min_size=1, max_size=4).map(tuple),
    sabotaged=st.frozensets(st.sampled_from(SABOTAGE[3:]), max_size=1),
    extra_faults=st.just(()),
    channel_fails=st.lists(st.sampled_from(["text", "voice", "attachment"]), max_size=1).map(tuple),
    channel_error=st.sampled_from(["transport", "crash"]),
    auto_mode=st.sampled_from([False, False, False, True]),
    plan_mode=st.booleans(),
    text=st.text(max_size=30),
    chunk=st.none() | st.integers(1, 5),
)
"""A user turn whose model mostly writes text, so its answer streams (and is often cut)."""
scenarios = any_scenario | streaming_scenario


def _faulty(system_type: type[System], order: int, name: str, ran: list[str], always_run: bool = False) -> System:
    def process(self: System, ctx: AgentContext) -> None:
        ran.append(name)
        raise RuntimeError(f"sabotaged {name}")

    namespace = {"order": order, "name": name, "process": process, "always_run": always_run,
                 "reads": system_type.reads, "writes": system_type.writes}
    return type(name, (System,), namespace)()


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stores]:
    opened = open_stores(tmp_path_factory.mktemp("invariants"), embedder=HashingEmbedder(dim=64))
    yield opened
    opened.close()


@attrs.frozen
class Ran:
    ctx: AgentContext
    channel: RecordingChannel
    sabotaged_ran: tuple[str, ...]
    history: tuple[ChatMessage, ...]
    memory: tuple[str, ...]
    rag_added: int
    rag_texts: tuple[str, ...]


def run(scenario: Scenario, stores: Stores) -> Ran:
    clock = FakeClock()
    remaining = list(scenario.script)

    def reply(request: LlmRequest) -> LlmReply | str:
        while remaining and remaining[0] == ADVANCE:
            remaining.pop(0)
            clock.advance(60)
        if not remaining:
            raise LlmCallError("script exhausted", kind=FailureKind.UNKNOWN)
        step = remaining.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step  # type: ignore[no-any-return]

    channel = RecordingChannel()
    if scenario.channel_fails:
        error = TransportError("the chat is down") if scenario.channel_error == "transport" else OSError("socket")
        channel.fail_with(error, kinds=scenario.channel_fails)  # type: ignore[arg-type]
    options = StandardOptions(plan_mode=scenario.plan_mode, turn_timeout=30.0, max_llm_calls=4)
    pipeline = standard_pipeline(ScriptedLLM(reply, chunk=scenario.chunk), channel, stores=stores, tools=[lookup, explode, chart, transfer],
                                 options=options, clock=clock)
    ran: list[str] = []
    for system_type in scenario.sabotaged:
        original = pipeline.get(system_type)
        pipeline.replace(system_type, _faulty(system_type, original.order, original.name, ran, original.always_run))
    for order in scenario.extra_faults:
        pipeline.insert(_faulty(System, order, f"Fault{order}", ran))
    session = Session(uuid.uuid4().hex, user_id=uuid.uuid4().hex)
    rag_before = asyncio.run(stores.rag.count())
    ctx = pipeline.build().run_turn_sync(session, IncomingMessage(scenario.text, auto_mode=scenario.auto_mode))
    return Ran(
        ctx, channel, tuple(ran), asyncio.run(stores.sessions.recent(history_scope(session), 100)),
        tuple(e.assistant_text for e in asyncio.run(stores.memory.recent(memory_scope(session), 100))),
        asyncio.run(stores.rag.count()) - rag_before, tuple(asyncio.run(stores.rag.texts(knowledge_scope(session)))),
    )


def _timed_out(ctx: AgentContext) -> bool:
    return any(f.kind is FailureKind.TIMEOUT and f.source is FailureSource.SYSTEM for f in ctx.failures)


PROPERTY = settings(deadline=None, max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture])


@PROPERTY
@given(scenario=scenarios)
def test_i1_every_user_turn_ends_with_a_response(stores: Stores, scenario: Scenario) -> None:
    """I1: a non-auto turn always ends with a TurnOutcome carrying a non-empty outgoing response."""
    ran = run(scenario, stores)
    outcome = ran.ctx.turn_outcome
    if not scenario.auto_mode:
        assert outcome is not None and outcome.outgoing_response is not None
        assert not outcome.outgoing_response.is_empty


@PROPERTY
@given(scenario=scenarios)
def test_i2_routing_is_attempted_at_most_once(stores: Stores, scenario: Scenario) -> None:
    """I2: at most one delivery attempt per turn; routing_outcome is set iff the channel was used."""
    ran = run(scenario, stores)
    outcome = ran.ctx.turn_outcome
    kinds = [s.kind for s in ran.channel.sent] + list(ran.channel.failed)
    assert kinds.count("text") <= 1 and kinds.count("voice") <= 1
    attempted = bool(kinds)
    if outcome is None or outcome.auto_mode:
        assert not attempted
        return
    assert (outcome.routing_outcome is not None) == attempted
    if outcome.routing_outcome is not None:
        routing = outcome.routing_outcome
        assert routing.attempted
        assert routing.sent_text == ("text" in [s.kind for s in ran.channel.sent])
        assert routing.sent_attachments == len(ran.channel.attachments)


@settings(deadline=None, max_examples=150)
@given(existing=st.none() | turn_outcomes(), auto_mode=st.booleans(), late=st.booleans())
def test_i3_feedback_never_overrides_and_marks_what_it_creates(
    existing: TurnOutcome | None, auto_mode: bool, late: bool
) -> None:
    """I3: the feedback guarantee keeps any non-empty response, does nothing in auto mode, marks fallbacks."""
    clock = FakeClock()
    ctx = make_context("hi", auto_mode=auto_mode, clock=clock, timeout=10.0,
                       components=[existing] if existing is not None else [])
    if late:
        clock.advance(11)
    run_system_sync(FeedbackGuaranteeSystem(), ctx)
    after = ctx.turn_outcome
    keeps = auto_mode or (
        existing is not None and existing.outgoing_response is not None and not existing.outgoing_response.is_empty
    )
    if keeps:
        assert after is existing
        return
    assert after is not None and after.fallback and after.outgoing_response is not None
    assert not after.outgoing_response.is_empty
    if existing is None:
        assert after.assistant_text is None
        assert after.finish_reason is (FinishReason.DEADLINE if late else FinishReason.ERROR)
    else:
        assert attrs.evolve(after, outgoing_response=existing.outgoing_response, fallback=existing.fallback) == existing


@PROPERTY
@given(scenario=scenarios)
def test_i4_i5_only_the_canonical_text_is_stored(stores: Stores, scenario: Scenario) -> None:
    """I4, I5: history, memory and RAG hold exactly the user message and turn_outcome.assistant_text,
    never a fallback text; routing and the feedback guarantee write none of them."""
    ran = run(scenario, stores)
    outcome = ran.ctx.turn_outcome
    if outcome is not None and outcome.fallback and outcome.outgoing_response is not None:
        fallback_text = outcome.outgoing_response.text
        assert fallback_text not in [m.content for m in ran.history if m.role.value == "assistant"]
        assert fallback_text not in ran.memory and fallback_text not in ran.rag_texts
    if outcome is not None and outcome.fallback:
        assert outcome.assistant_text is None
    memory_ran = MemoryPersistSystem not in scenario.sabotaged and not _timed_out(ran.ctx) and outcome is not None
    text = outcome.assistant_text if outcome is not None else None
    if memory_ran and outcome is not None:
        user = ran.history[0] if ran.history else None
        assert user is not None and user.role.value == "user"
        assert ran.history[1:] == ((ChatMessage.assistant(text),) if text else ())
        assert ran.memory == ((text,) if text else ())
    else:
        assert ran.history == () and ran.memory == ()
    rag_ran = RagIndexingSystem not in scenario.sabotaged and not _timed_out(ran.ctx)
    assert ran.rag_added == (1 if rag_ran and text else 0)
    assert ran.rag_texts == ((text,) if rag_ran and text else ())


@PROPERTY
@given(scenario=scenarios)
def test_i6_each_system_exception_is_one_failure_naming_it(stores: Stores, scenario: Scenario) -> None:
    """I6: every raising system yields exactly one SYSTEM failure naming it; the outcome's failures are ctx.failures."""
    ran = run(scenario, stores)
    system_failures = [f.component for f in ran.ctx.failures
                       if f.source is FailureSource.SYSTEM and f.kind is FailureKind.EXCEPTION]
    for name in ran.sabotaged_ran:
        assert system_failures.count(name) == 1
    assert len(system_failures) == len(set(system_failures))
    if ran.ctx.turn_outcome is not None:
        assert ran.ctx.turn_outcome.failures == ran.ctx.failures


@PROPERTY
@given(scenario=scenarios)
def test_i7_transport_errors_become_a_routing_outcome(stores: Stores, scenario: Scenario) -> None:
    """I7: a failing channel never propagates; it gives attempted=True, an error message and a TRANSPORT failure."""
    ran = run(scenario, stores)
    transport = [f for f in ran.ctx.failures if f.source is FailureSource.TRANSPORT]
    assert len(transport) == len(ran.channel.failed)
    outcome = ran.ctx.turn_outcome
    if ran.channel.failed:
        assert outcome is not None and outcome.routing_outcome is not None
        routing = outcome.routing_outcome
        assert routing.attempted and routing.error_message
        expected = "the chat is down" if scenario.channel_error == "transport" else "the response could not be delivered"
        assert routing.error_message == expected
        if not ran.channel.sent:
            assert not routing.delivered


@PROPERTY
@given(scenario=scenarios)
def test_i8_finish_reason_is_the_highest_priority_observed(stores: Stores, scenario: Scenario) -> None:
    """I8: the finish reason is resolve_finish_reason over what the turn observed."""
    ran = run(scenario, stores)
    ctx, outcome = ran.ctx, ran.ctx.turn_outcome
    if outcome is None:
        assert scenario.auto_mode
        return
    observed: set[FinishReason] = set()
    if _timed_out(ctx):
        observed.add(FinishReason.DEADLINE)
    stop = ctx.get(ToolLoopStop)
    if stop is not None:
        observed.add(stop.reason)
    if ctx.has(LlmFailure):
        observed.add(FinishReason.ERROR)
    if ctx.has(PlanProposal):
        observed.add(FinishReason.PLAN_MODE)
    produced = any(ctx.has(t) for t in (LlmResponse, LlmFailure, ToolLoopStop, PlanProposal))
    finalized = TurnOutcomeFinalizationSystem not in scenario.sabotaged and not _timed_out(ctx)
    if finalized and scenario.auto_mode and not produced:
        observed.add(FinishReason.ERROR)
    if not (finalized and (produced or scenario.auto_mode)):
        # The feedback guarantee made the outcome: nothing but the deadline is known.
        observed = {FinishReason.ERROR} | (observed & {FinishReason.DEADLINE})
    assert outcome.finish_reason is resolve_finish_reason(observed)


@PROPERTY
@given(scenario=scenarios)
def test_i14_what_the_user_saw_streamed_agrees_with_what_is_stored(stores: Stores, scenario: Scenario) -> None:
    """I14: a streamed message is closed with the outcome's text, which is the stored assistant_text; a stream cut
    off midway is aborted and followed by the fallback message, and nothing partial is stored as an answer."""
    ran = run(scenario, stores)
    outcome, streams = ran.ctx.turn_outcome, ran.channel.streams
    assert len(streams) <= 1
    if scenario.auto_mode or not streams:
        assert not ran.ctx.has(StreamedText)
        return
    (stream,) = streams
    streamed = ran.ctx.require(StreamedText)
    assert stream.shown == streamed.text and stream.deltas and all(stream.deltas)
    assert stream.closed is None or stream.aborted is None
    routed = outcome is not None and outcome.routing_outcome is not None
    if not routed:
        assert stream.closed is None and stream.aborted is None
        return
    assert outcome is not None and outcome.outgoing_response is not None
    if stream.closed is not None:
        assert not outcome.fallback and stream.closed == outcome.outgoing_response.text == outcome.assistant_text
        assert ran.channel.texts == [stream.closed]
    elif "text" not in ran.channel.failed:
        assert stream.aborted and ran.channel.texts == [t for t in [outcome.outgoing_response.text] if t]
        assert outcome.fallback or outcome.outgoing_response.text is None
    if not streamed.complete:
        assert outcome.fallback and outcome.assistant_text is None and stream.aborted
        assert not [m for m in ran.history if m.role.value == "assistant"]
        assert ran.memory == () and ran.rag_texts == ()
