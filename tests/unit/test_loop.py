"""AgentLoop: build-time validation, describe(), failure capture, deadlines, serialisation."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

import attrs
import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from agentloop import (
    AgentContext,
    AgentLoop,
    FailureKind,
    FailureSource,
    FinishReason,
    IncomingMessage,
    OutgoingResponse,
    PipelineError,
    Session,
    System,
    TurnOutcome,
)
from agentloop.adapters import InMemoryMetrics
from agentloop.testing import FakeClock, make_system, run_pipeline


@attrs.frozen
class Draft:
    text: str


@attrs.frozen
class Review:
    ok: bool


def finalize(text: str = "done") -> Callable[[AgentContext], None]:
    return lambda ctx: ctx.set(TurnOutcome(FinishReason.SUCCESS, assistant_text=text, outgoing_response=OutgoingResponse.text_only(text)))


# --- building -------------------------------------------------------------------------


def test_systems_run_sorted_by_order_and_stable_on_ties() -> None:
    ran: list[str] = []
    systems = [make_system(n, o, action=lambda ctx, n=n: ran.append(n)) for n, o in [("C", 30), ("A", 10), ("B1", 20), ("B2", 20)]]
    loop = AgentLoop(systems)
    assert [s.name for s in loop.systems] == ["A", "B1", "B2", "C"]
    run_pipeline(systems)
    assert ran == ["A", "B1", "B2", "C"]


def test_duplicate_names_are_refused_naming_both_classes() -> None:
    first, second = make_system("Same", 10), make_system("Same", 20)
    with pytest.raises(PipelineError, match="duplicate system name 'Same'"):
        AgentLoop([first, second])


def test_reading_what_only_a_later_system_writes_is_refused() -> None:
    reader = make_system("Reviewer", 10, reads=(Draft,), writes=(Review,))
    writer = make_system("Drafter", 20, writes=(Draft,))
    with pytest.raises(PipelineError) as info:
        AgentLoop([reader, writer])
    message = str(info.value)
    assert "Reviewer (order 10) reads Draft" in message and "Drafter (order 20)" in message


def test_a_turn_input_may_be_read_before_any_writer() -> None:
    reader = make_system("Reviewer", 10, reads=(Draft,))
    writer = make_system("Drafter", 20, writes=(Draft,))
    assert len(AgentLoop([reader, writer], inputs=(Draft,)).systems) == 2


def test_a_read_nobody_writes_is_an_optional_read() -> None:
    assert AgentLoop([make_system("Reviewer", 10, reads=(Draft,))]).systems[0].name == "Reviewer"


def test_a_system_may_read_and_rewrite_what_an_earlier_one_wrote() -> None:
    loop = AgentLoop([make_system("Drafter", 10, writes=(Draft,)), make_system("Editor", 20, reads=(Draft,), writes=(Draft,))])
    assert [s.name for s in loop.systems] == ["Drafter", "Editor"]


def test_equal_order_writers_of_one_type_are_refused() -> None:
    with pytest.raises(PipelineError, match="DrafterA and DrafterB both have order 10 and both write Draft"):
        AgentLoop([make_system("DrafterA", 10, writes=(Draft,)), make_system("DrafterB", 10, writes=(Draft, Review))])


def test_equal_order_writers_of_different_types_are_fine() -> None:
    assert len(AgentLoop([make_system("A", 10, writes=(Draft,)), make_system("B", 10, writes=(Review,))]).systems) == 2


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({}, "needs an integer class attribute `order`"),
        ({"order": "10"}, "needs an integer class attribute `order`"),
        ({"order": 1, "reads": [Draft]}, "`reads` must be a tuple of types"),
        ({"order": 1, "writes": ("Draft",)}, "`writes` must be a tuple of types"),
        ({"order": 1, "name": ""}, "non-empty string `name`"),
    ],
)
def test_malformed_declarations_are_refused(attributes: dict[str, object], message: str) -> None:
    cls = type("Broken", (System,), {"process": lambda self, ctx: None, **attributes})
    with pytest.raises(PipelineError, match=message):
        AgentLoop([cls()])


def test_a_system_without_process_is_refused() -> None:
    cls = type("Lazy", (System,), {"order": 1})
    with pytest.raises(PipelineError, match="'Lazy' does not implement process"):
        AgentLoop([cls()])


def test_only_system_instances_are_accepted() -> None:
    with pytest.raises(PipelineError, match="is not a System instance"):
        AgentLoop([object()])  # type: ignore[list-item]


def test_turn_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="turn_timeout"):
        AgentLoop([], turn_timeout=0)


def test_name_defaults_to_the_class_name_and_subclasses_get_their_own() -> None:
    class Base(System):
        order = 1

        def process(self, ctx: AgentContext) -> None:
            pass

    class Special(Base):
        pass

    class Named(Base):
        name = "custom"

    assert (Base().name, Special().name, Named().name) == ("Base", "Special", "custom")
    assert "name='Special' order=1" in repr(Special())


# --- describe -------------------------------------------------------------------------


def test_describe_text_lists_order_name_reads_writes() -> None:
    loop = AgentLoop([make_system("Drafter", 10, writes=(Draft,)), make_system("Reviewer", 20, reads=(Draft,), writes=(Review,), always_run=True)])
    text = str(loop.describe())
    lines = text.splitlines()
    assert lines[0].split() == ["order", "name", "reads", "writes"]
    assert lines[2].split() == ["10", "Drafter", "-", "Draft"]
    assert lines[3].split() == ["20", "Reviewer", "(always_run)", "Draft", "Review"]


def test_describe_mermaid_shows_run_order_and_data_flow() -> None:
    loop = AgentLoop([make_system("Drafter", 10, writes=(Draft,)), make_system("Reviewer", 20, reads=(Draft,))])
    mermaid = loop.describe().to_mermaid()
    assert mermaid.splitlines() == [
        "flowchart TD",
        '    s0["10 Drafter"]',
        '    s1["20 Reviewer"]',
        "    s0 --> s1",
        "    s0 -. Draft .-> s1",
    ]


# --- running --------------------------------------------------------------------------


def boom(ctx: AgentContext) -> None:
    raise RuntimeError("kaput")


def test_an_exception_becomes_one_failure_and_the_turn_goes_on() -> None:
    clock = FakeClock()
    ran: list[str] = []
    ctx = run_pipeline(
        [make_system("Breaker", 10, boom), make_system("After", 20, action=lambda c: ran.append("After"))], clock=clock
    )
    assert ran == ["After"]
    (failure,) = ctx.failures
    assert (failure.source, failure.component, failure.kind) == (FailureSource.SYSTEM, "Breaker", FailureKind.EXCEPTION)
    assert failure.message == "RuntimeError: kaput"
    assert failure.timestamp == clock.now()


class Escape(BaseException):
    """A custom BaseException subclass, which `except Exception` would let by."""


RAISED: tuple[type[BaseException], ...] = (ValueError, SystemExit, GeneratorExit, Escape)
"""What the systems of the I6 property raise: exceptions and the BaseExceptions a system may raise too."""


def _exit(ctx: AgentContext) -> None:
    raise SystemExit(2)


def _generator_exit(ctx: AgentContext) -> None:
    raise GeneratorExit("misused")


async def _escape(ctx: AgentContext) -> None:
    raise Escape("out of here")


async def _async_exit(ctx: AgentContext) -> None:
    await asyncio.sleep(0)
    raise SystemExit("stop")


@pytest.mark.parametrize(("action", "message"), [
    (_exit, "SystemExit: 2"), (_async_exit, "SystemExit: stop"), (_generator_exit, "GeneratorExit: misused"),
    (_escape, "Escape: out of here"),
])
def test_a_system_raising_a_base_exception_like_system_exit_fails_alone_and_the_turn_goes_on(
    action: Callable[[AgentContext], object], message: str
) -> None:
    ran: list[str] = []
    ctx = run_pipeline([make_system("Quitter", 10, action), make_system("After", 20, action=lambda c: ran.append("After"))])
    assert ran == ["After"]
    (failure,) = ctx.failures
    assert (failure.source, failure.component, failure.kind, failure.message) == (
        FailureSource.SYSTEM, "Quitter", FailureKind.EXCEPTION, message)


def test_keyboard_interrupt_from_a_system_still_stops_the_turn() -> None:
    def interrupt(ctx: AgentContext) -> None:
        raise KeyboardInterrupt

    ran: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        run_pipeline([make_system("Interrupted", 10, interrupt), make_system("After", 20, action=lambda c: ran.append("After"))])
    assert ran == []


def test_a_failure_is_logged_with_its_traceback() -> None:
    with capture_logs() as logs:
        ctx = run_pipeline([make_system("Breaker", 10, boom)])
    (event,) = [e for e in logs if e["event"] == "system.failed"]
    assert event["system"] == "Breaker" and event["log_level"] == "error"
    assert isinstance(event["exc_info"], RuntimeError)
    assert event["turn_id"] == ctx.turn_id and event["session_id"] == "test-session"


def test_a_store_out_of_reach_is_logged_in_one_line_without_a_traceback() -> None:
    """An outage is an operating condition, not a bug: the log says which system and why, in one line."""
    from agentloop.errors import StoreUnavailableError

    def unreachable(ctx: AgentContext) -> None:
        raise StoreUnavailableError("the stores at test", "the server is restarting")

    with capture_logs() as logs:
        ctx = run_pipeline([make_system("Persist", 10, unreachable)])
    (event,) = [e for e in logs if e["event"] == "system.failed"]
    assert event["system"] == "Persist" and "exc_info" not in event
    assert "the server is restarting" in event["error"]
    assert [f.component for f in ctx.failures] == ["Persist"]


def test_a_component_missing_because_an_earlier_system_failed_is_logged_in_one_line_naming_that_system() -> None:
    """A consequence, not a second bug: the earlier failure was logged; the later one adds a line, no traceback."""
    from agentloop.errors import StoreUnavailableError

    @attrs.frozen
    class Built:
        text: str

    def unreachable(ctx: AgentContext) -> None:
        raise StoreUnavailableError("the stores at test", "the server is restarting")

    def reader(ctx: AgentContext) -> None:
        ctx.require(Built)

    with capture_logs() as logs:
        ctx = run_pipeline([make_system("Builder", 10, unreachable, writes=(Built,)), make_system("Reader", 20, reader, reads=(Built,))])
    builder, reader_failed = [e for e in logs if e["event"] == "system.failed"]
    assert builder["system"] == "Builder" and reader_failed["system"] == "Reader"
    assert "exc_info" not in reader_failed and reader_failed["after"] == "Builder" and "Built" in reader_failed["error"]
    assert [f.component for f in ctx.failures] == ["Builder", "Reader"]


def test_a_missing_component_with_no_earlier_failure_is_logged_with_its_traceback() -> None:
    @attrs.frozen
    class Never:
        text: str

    with capture_logs() as logs:
        run_pipeline([make_system("Reader", 20, lambda ctx: ctx.require(Never), reads=(Never,))])
    (event,) = [e for e in logs if e["event"] == "system.failed"]
    assert isinstance(event["exc_info"], LookupError)


def test_one_debug_event_per_system_run_and_one_info_event_per_turn() -> None:
    with capture_logs() as logs:
        ctx = run_pipeline([make_system("A", 10), make_system("B", 20, boom)])
    runs = [e for e in logs if e["event"] == "system.run"]
    assert [(e["system"], e["outcome"]) for e in runs] == [("A", "ok"), ("B", "error")]
    assert all(e["turn_id"] == ctx.turn_id and e["session_id"] == "test-session" and e["duration_ms"] >= 0 for e in runs)
    (turn,) = [e for e in logs if e["event"] == "turn.finished"]
    assert turn["log_level"] == "info" and turn["failures"] == 1


def test_filtered_debug_level_emits_no_system_events() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    try:
        with capture_logs() as logs:
            run_pipeline([make_system("A", 10)])
    finally:
        structlog.reset_defaults()
    assert [e["event"] for e in logs] == ["turn.finished"]


def test_async_systems_are_awaited() -> None:
    class Slow(System):
        order = 10
        writes = (Draft,)

        async def process(self, ctx: AgentContext) -> None:
            await asyncio.sleep(0)
            ctx.set(Draft("async"))

    assert run_pipeline([Slow()]).get(Draft) == Draft("async")


def test_should_process_can_skip_a_system() -> None:
    class Picky(System):
        order = 10
        writes = (Draft,)

        def should_process(self, ctx: AgentContext) -> bool:
            return ctx.incoming.text == "yes"

        def process(self, ctx: AgentContext) -> None:
            ctx.set(Draft("ran"))

    assert run_pipeline([Picky()], "no").get(Draft) is None
    assert run_pipeline([Picky()], "yes").get(Draft) == Draft("ran")


def test_an_exception_in_should_process_is_captured_too() -> None:
    class Picky(System):
        order = 10

        def should_process(self, ctx: AgentContext) -> bool:
            raise ValueError("cannot decide")

        def process(self, ctx: AgentContext) -> None:
            pass

    (failure,) = run_pipeline([Picky()]).failures
    assert failure.component == "Picky" and "cannot decide" in failure.message


def test_turn_inputs_are_handed_to_the_systems() -> None:
    seen: list[Draft] = []
    ctx = run_pipeline(
        [make_system("Reviewer", 10, reads=(Draft,), action=lambda c: seen.append(c.require(Draft)))],
        inputs=(Draft,),
        components=[Draft("given")],
    )
    assert seen == [Draft("given")] and ctx.failures == ()


def test_missing_required_component_names_the_system() -> None:
    (failure,) = run_pipeline([make_system("Reviewer", 10, reads=(Draft,), action=lambda c: c.require(Draft) and None)]).failures
    assert failure.component == "Reviewer"
    assert "'Reviewer' requires a Draft component" in failure.message


def test_outcome_carries_every_failure_of_the_turn_even_later_ones() -> None:
    ctx = run_pipeline([make_system("Finalize", 10, finalize(), writes=(TurnOutcome,)), make_system("SideEffect", 20, action=boom)])
    assert ctx.turn_outcome is not None
    assert [f.component for f in ctx.turn_outcome.failures] == ["SideEffect"]
    assert ctx.turn_outcome.failures == ctx.failures


def test_deadline_skips_all_but_always_run_systems() -> None:
    clock = FakeClock()
    ran: list[str] = []
    systems = [
        make_system("Finalize", 10, finalize(), writes=(TurnOutcome,)),
        make_system("Slow", 20, lambda c: (ran.append("Slow"), clock.advance(5))[0]),
        make_system("Skipped", 30, lambda c: ran.append("Skipped")),
        make_system("Guarantee", 40, always_run=True, action=lambda c: ran.append("Guarantee")),
        make_system("AlsoSkipped", 50, lambda c: ran.append("AlsoSkipped")),
    ]
    ctx = run_pipeline(systems, turn_timeout=1.0, clock=clock)
    assert ran == ["Slow", "Guarantee"]
    (timeout,) = ctx.failures
    assert (timeout.kind, timeout.component) == (FailureKind.TIMEOUT, "Skipped")
    assert ctx.turn_outcome is not None and ctx.turn_outcome.finish_reason is FinishReason.DEADLINE


def test_a_hanging_async_system_is_interrupted_at_the_deadline() -> None:
    class Hang(System):
        order = 10

        async def process(self, ctx: AgentContext) -> None:
            await asyncio.sleep(30)

    ran: list[str] = []
    ctx = run_pipeline([Hang(), make_system("Guarantee", 20, always_run=True, action=lambda c: ran.append("G"))], turn_timeout=0.05)
    (timeout,) = ctx.failures
    assert (timeout.kind, timeout.component) == (FailureKind.TIMEOUT, "Hang")
    assert ran == ["G"]


def test_a_system_raising_timeout_error_itself_is_an_exception_not_the_deadline() -> None:
    class Raises(System):
        order = 10

        async def process(self, ctx: AgentContext) -> None:
            raise TimeoutError("upstream timed out")

    (failure,) = run_pipeline([Raises()], turn_timeout=10).failures
    assert failure.kind is FailureKind.EXCEPTION


def test_metrics_are_recorded() -> None:
    metrics = InMemoryMetrics()
    loop = AgentLoop([make_system("Breaker", 10, boom)], metrics=metrics)
    loop.run_turn_sync(Session("s"), IncomingMessage("x"))
    assert metrics.counter("agentloop.system.failures", {"system": "Breaker"}) == 1
    assert len(metrics.observations("agentloop.turn.duration_ms")) == 1


def test_run_turn_sync_refuses_to_run_inside_an_event_loop() -> None:
    loop = AgentLoop([])

    async def inside() -> None:
        loop.run_turn_sync(Session("s"), IncomingMessage("x"))

    with pytest.raises(RuntimeError, match="await run_turn instead"):
        asyncio.run(inside())


# --- sessions -------------------------------------------------------------------------


class Journal(System):
    """Records when each turn starts and ends, sleeping in between."""

    order = 10

    def __init__(self, log: list[tuple[str, str, str]], delays: dict[str, float]) -> None:
        self.log = log
        self.delays = delays

    async def process(self, ctx: AgentContext) -> None:
        self.log.append(("start", ctx.session.id, ctx.incoming.text))
        await asyncio.sleep(self.delays.get(ctx.incoming.text, 0.0))
        self.log.append(("end", ctx.session.id, ctx.incoming.text))


async def run_concurrently(loop: AgentLoop, arrivals: list[tuple[str, str]]) -> None:
    tasks = [asyncio.create_task(loop.run_turn(Session(sid), IncomingMessage(text))) for sid, text in arrivals]
    await asyncio.gather(*tasks)


@settings(deadline=None, max_examples=40)
@given(
    st.lists(
        st.tuples(st.sampled_from(["s1", "s2", "s3"]), st.floats(0, 0.002)),
        min_size=1,
        max_size=12,
    )
)
def test_turns_of_one_session_never_interleave_and_none_is_lost(arrivals: list[tuple[str, float]]) -> None:
    """I9: per session, turns run one at a time in arrival order, each exactly once;
    different sessions overlap."""
    log: list[tuple[str, str, str]] = []
    named = [(sid, f"{sid}-{i}") for i, (sid, _) in enumerate(arrivals)]
    delays = {text: delay for (_, text), (_, delay) in zip(named, arrivals, strict=True)}
    loop = AgentLoop([Journal(log, delays)])
    asyncio.run(run_concurrently(loop, named))

    for sid in {sid for sid, _ in named}:
        events = [(kind, text) for kind, s, text in log if s == sid]
        expected = [text for s, text in named if s == sid]
        assert events == [pair for text in expected for pair in (("start", text), ("end", text))]
    if len({sid for sid, _ in named}) > 1:
        open_sessions: set[str] = set()
        overlapped = False
        for kind, sid, _ in log:
            if kind == "start":
                overlapped |= bool(open_sessions - {sid})
                open_sessions.add(sid)
            else:
                open_sessions.discard(sid)
        assert overlapped, "turns of different sessions should run concurrently"
    assert loop._gates._queues == {}, "session gates must not leak"


@settings(deadline=None, max_examples=25)
@given(
    st.lists(st.tuples(st.sampled_from(["s1", "s2", "s3", "s4", "s5"]), st.floats(0, 0.002)), min_size=1, max_size=12),
    st.integers(1, 3),
)
def test_at_most_max_concurrent_turns_run_at_once_and_every_waiting_turn_runs(
    arrivals: list[tuple[str, float]], bound: int
) -> None:
    """I9: with `max_concurrent_turns`, no more turns than the bound are in flight, each turn
    runs exactly once, and per session in arrival order."""
    log: list[tuple[str, str, str]] = []
    named = [(sid, f"{sid}-{i}") for i, (sid, _) in enumerate(arrivals)]
    delays = {text: delay for (_, text), (_, delay) in zip(named, arrivals, strict=True)}
    loop = AgentLoop([Journal(log, delays)], max_concurrent_turns=bound)
    asyncio.run(run_concurrently(loop, named))

    in_flight = peak = 0
    for kind, _, _ in log:
        in_flight += 1 if kind == "start" else -1
        peak = max(peak, in_flight)
    assert peak <= bound
    assert sorted(text for kind, _, text in log if kind == "end") == sorted(text for _, text in named)
    for sid in {sid for sid, _ in named}:
        assert [text for kind, s, text in log if s == sid and kind == "start"] == [text for s, text in named if s == sid]


def test_max_concurrent_turns_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="max_concurrent_turns must be at least 1"):
        AgentLoop([], max_concurrent_turns=0)


@attrs.frozen
class Spec:
    order: int
    behaviour: str  # "raise", "sleep", "write", "noop"
    is_async: bool


specs = st.lists(
    st.builds(Spec, order=st.integers(0, 4), behaviour=st.sampled_from(["raise", "sleep", "write", "noop"]), is_async=st.booleans()),
    max_size=10,
)


def build(spec_list: list[Spec], ran: list[str]) -> tuple[list[System], dict[str, type]]:
    systems: list[System] = []
    outputs: dict[str, type] = {}
    for index, spec in enumerate(spec_list):
        name = f"S{index}"
        output = attrs.make_class(f"Out{index}", ["value"], frozen=True)
        outputs[name] = output

        def act(ctx: AgentContext, spec: Spec = spec, name: str = name, output: type = output) -> None:
            ran.append(name)
            if spec.behaviour == "raise":
                raise RAISED[int(name[1:]) % len(RAISED)](f"{name} failed")
            if spec.behaviour == "write":
                ctx.set(output(name))

        if spec.is_async:

            async def process(self: System, ctx: AgentContext, act: Callable[[AgentContext], None] = act, spec: Spec = spec) -> None:
                await asyncio.sleep(0.0005 if spec.behaviour == "sleep" else 0)
                act(ctx)

        else:

            def process(self: System, ctx: AgentContext, act: Callable[[AgentContext], None] = act) -> None:  # type: ignore[misc]
                act(ctx)

        cls = type(name, (System,), {"order": spec.order, "writes": (output,), "process": process})
        systems.append(cls())
    return systems, outputs


@settings(deadline=None, max_examples=80)
@given(specs)
def test_every_exception_gives_exactly_one_failure_naming_its_system(spec_list: list[Spec]) -> None:
    """I6: each raising system (an Exception, or SystemExit, GeneratorExit or another BaseException)
    yields exactly one FailureEvent naming it; every system still runs, in order; writes of the
    others land; the outcome carries the failures."""
    ran: list[str] = []
    systems, outputs = build(spec_list, ran)
    systems.append(make_system("Finalize", 99, finalize(), writes=(TurnOutcome,)))
    ctx = run_pipeline(systems)
    expected_order = [s.name for s in sorted(systems, key=lambda s: s.order) if s.name != "Finalize"]
    assert ran == expected_order
    raisers = sorted(f"S{i}" for i, spec in enumerate(spec_list) if spec.behaviour == "raise")
    assert sorted(f.component for f in ctx.failures) == raisers
    assert all(f.kind is FailureKind.EXCEPTION and f.source is FailureSource.SYSTEM for f in ctx.failures)
    for index, spec in enumerate(spec_list):
        written = ctx.get(outputs[f"S{index}"])
        assert (written is not None) == (spec.behaviour == "write")
    assert ctx.turn_outcome is not None and ctx.turn_outcome.failures == ctx.failures


def test_threads_running_one_session_synchronously_take_turns() -> None:
    """I9 across threads: each run_turn_sync has its own event loop, yet one session's
    turns still run one at a time and none is lost."""
    log: list[tuple[str, str, str]] = []
    loop = AgentLoop([Journal(log, {"a": 0.05, "b": 0.05})])
    threads = [threading.Thread(target=loop.run_turn_sync, args=(Session("s"), IncomingMessage(t))) for t in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in threads), "a turn hung"
    assert sorted(log) == sorted([("start", "s", "a"), ("end", "s", "a"), ("start", "s", "b"), ("end", "s", "b")])
    assert log[0][0] == "start" and log[1][0] == "end" and log[0][2] == log[1][2]
    assert loop._gates._queues == {}


def one_at_a_time(log: list[tuple[str, str, str]], session_id: str) -> list[str]:
    """The texts of `session_id`'s turns in the order they ran; fails if two overlapped."""
    events = [(kind, text) for kind, sid, text in log if sid == session_id]
    assert all(events[i][0] == "start" and events[i + 1] == ("end", events[i][1]) for i in range(0, len(events), 2)), events
    return [text for kind, text in events if kind == "start"]


def turns_after(thread: threading.Thread, loop: AgentLoop, log: list[tuple[str, str, str]]) -> list[str]:
    """Session "s"'s turns in run order, once `thread` is done; fails on a hang or a leaked gate."""
    thread.join(timeout=10)
    assert not thread.is_alive(), "a turn hung"
    assert loop._gates._queues == {}, "session gates must not leak"
    return one_at_a_time(log, "s")


def sync_turn_in_a_thread(loop: AgentLoop, session: Session, text: str) -> threading.Thread:
    """A daemon thread running one `run_turn_sync`, so a hang fails the test instead of pytest."""
    thread = threading.Thread(target=loop.run_turn_sync, args=(session, IncomingMessage(text)), daemon=True)
    thread.start()
    return thread


def test_a_sync_turn_from_a_thread_waits_for_the_async_turn_of_its_session() -> None:
    """I9 across styles: while a turn runs on the event loop, `run_turn_sync` of the same
    session from a thread waits its turn; neither hangs, fails or is lost."""
    log: list[tuple[str, str, str]] = []
    loop = AgentLoop([Journal(log, {"async": 0.1})])

    async def main() -> threading.Thread:
        turn = asyncio.create_task(loop.run_turn(Session("s"), IncomingMessage("async")))
        await asyncio.sleep(0.02)
        thread = sync_turn_in_a_thread(loop, Session("s"), "sync")
        ctx = await asyncio.wait_for(turn, timeout=10)
        assert ctx.failures == ()
        return thread

    thread = asyncio.run(main())
    assert turns_after(thread, loop, log) == ["async", "sync"]


def test_an_async_turn_waits_for_a_sync_turn_without_blocking_its_event_loop() -> None:
    """I9 across styles, the other way round: the async turn of a session held by a
    thread's `run_turn_sync` waits, while other sessions' turns go on on the same loop."""
    log: list[tuple[str, str, str]] = []
    loop = AgentLoop([Journal(log, {"sync": 0.2})])
    thread = sync_turn_in_a_thread(loop, Session("s"), "sync")
    while not log:
        time.sleep(0.001)

    async def main() -> None:
        waiting = asyncio.create_task(loop.run_turn(Session("s"), IncomingMessage("async")))
        other = await asyncio.wait_for(loop.run_turn(Session("elsewhere"), IncomingMessage("other")), timeout=10)
        assert other.failures == () and not waiting.done(), "another session is not held up by the waiting turn"
        assert (await asyncio.wait_for(waiting, timeout=10)).failures == ()

    asyncio.run(main())
    assert turns_after(thread, loop, log) == ["sync", "async"]


def test_a_cancelled_waiting_turn_passes_the_gate_on() -> None:
    """A turn cancelled while it waits for its session never runs and never holds the
    session: the next turn, from a thread, still runs."""
    log: list[tuple[str, str, str]] = []
    loop = AgentLoop([Journal(log, {"first": 0.1})])

    async def main() -> threading.Thread:
        first = asyncio.create_task(loop.run_turn(Session("s"), IncomingMessage("first")))
        await asyncio.sleep(0.01)
        cancelled = asyncio.create_task(loop.run_turn(Session("s"), IncomingMessage("cancelled")))
        await asyncio.sleep(0.01)
        thread = sync_turn_in_a_thread(loop, Session("s"), "last")
        await asyncio.sleep(0.01)
        cancelled.cancel()
        await asyncio.wait_for(first, timeout=10)
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        return thread

    thread = asyncio.run(main())
    assert turns_after(thread, loop, log) == ["first", "last"]


def test_a_turn_waiting_on_a_stopped_event_loop_does_not_hold_its_session() -> None:
    """I9: a turn queued on an event loop its owner stopped (and may close without
    cancelling it) is passed over when the session frees, so the next turn runs instead
    of hanging; when that loop runs again, its turn queues again and runs too."""
    log: list[tuple[str, str, str]] = []
    loop = AgentLoop([Journal(log, {"first": 0.2})])
    first = sync_turn_in_a_thread(loop, Session("s"), "first")
    while not log:
        time.sleep(0.001)
    stopped = asyncio.new_event_loop()
    try:
        queued = stopped.create_task(loop.run_turn(Session("s"), IncomingMessage("stopped")))
        stopped.run_until_complete(asyncio.sleep(0.05))  # the turn waits at the gate; then its loop stops
        first.join(timeout=10)  # the first turn ends while that loop is stopped
        last = sync_turn_in_a_thread(loop, Session("s"), "last")
        last.join(timeout=5)
        hung = last.is_alive()
    finally:
        stopped.run_until_complete(asyncio.wait_for(queued, timeout=10))
        stopped.close()
    assert not hung, "a turn on a stopped event loop held the session"
    assert turns_after(last, loop, log) == ["first", "last", "stopped"]


def test_a_structlog_set_up_without_level_filtering_still_runs_turns() -> None:
    structlog.configure(wrapper_class=structlog.BoundLogger, logger_factory=structlog.ReturnLoggerFactory())
    try:
        ctx = run_pipeline([make_system("A", 10, finalize(), writes=(TurnOutcome,))])
    finally:
        structlog.reset_defaults()
    assert ctx.turn_outcome is not None and ctx.failures == ()


def test_unconfigured_structlog_keeps_stdout_for_the_bot() -> None:
    import subprocess
    import sys

    script = (
        "from agentloop.testing import make_system, run_pipeline\n"
        "run_pipeline([make_system('A', 10)])\n"
        "def boom(ctx): raise RuntimeError('kaput')\n"
        "run_pipeline([make_system('Breaker', 10, boom)])\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "turn.finished" not in result.stdout and "system.run" not in result.stdout
    assert "system.failed" in result.stdout + result.stderr


def test_a_hung_always_run_system_is_interrupted_after_its_grace() -> None:
    class HungChannel(System):
        order = 60
        always_run = True

        async def process(self, ctx: AgentContext) -> None:
            await asyncio.sleep(30)

    loop = AgentLoop([make_system("Finalize", 10, finalize(), writes=(TurnOutcome,)), HungChannel()], turn_timeout=0.05, always_run_grace=0.05)
    ctx = loop.run_turn_sync(Session("s"), IncomingMessage("x"))
    (timeout,) = ctx.failures
    assert (timeout.kind, timeout.component) == (FailureKind.TIMEOUT, "HungChannel")
    assert "0.05s after the turn deadline" in timeout.message
    assert ctx.turn_outcome is not None and ctx.turn_outcome.finish_reason is FinishReason.DEADLINE


def test_always_run_grace_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="always_run_grace"):
        AgentLoop([], always_run_grace=-1)
