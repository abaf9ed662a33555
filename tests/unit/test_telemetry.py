"""The process-wide telemetry switch: off by default, metrics to a component's own sink and the process's, spans ended on cancel."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping

import pytest

from agentloop import TELEMETRY, AgentContext, AgentLoop, IncomingMessage, Session, System
from agentloop.adapters import InMemoryMetrics
from agentloop.ports import AttributeValue
from agentloop.testing import make_system


class RecordedSpan:
    def __init__(self, name: str, attributes: Mapping[str, AttributeValue], log: list[str]) -> None:
        self.name = name
        self.attributes = dict(attributes)
        self.failure: str | None = None
        self.log = log

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        self.attributes[key] = value

    def fail(self, description: str) -> None:
        self.failure = description

    def end(self) -> None:
        self.log.append(f"end {self.name}")


class RecordingTracer:
    def __init__(self) -> None:
        self.log: list[str] = []
        self.spans: dict[str, RecordedSpan] = {}

    def start_span(self, name: str, attributes: Mapping[str, AttributeValue]) -> RecordedSpan:
        self.log.append(f"start {name}")
        self.spans[name] = RecordedSpan(name, attributes, self.log)
        return self.spans[name]


@pytest.fixture
def tracer() -> Iterator[RecordingTracer]:
    recording = RecordingTracer()
    TELEMETRY.enable(recording, None)
    yield recording
    TELEMETRY.disable()


class Skipped(System):
    order = 20

    def should_process(self, ctx: AgentContext) -> bool:
        return False

    def process(self, ctx: AgentContext) -> None:
        raise AssertionError("a skipped system does not run")


def boom(ctx: AgentContext) -> None:
    raise RuntimeError("kaput")


def test_telemetry_is_off_by_default() -> None:
    assert TELEMETRY.tracer is None and TELEMETRY.metrics is None


def test_a_loops_own_metrics_and_the_process_metrics_both_get_every_value() -> None:
    own, shared = InMemoryMetrics(), InMemoryMetrics()
    TELEMETRY.enable(None, shared)
    try:
        AgentLoop([make_system("Breaker", 10, boom)], metrics=own).run_turn_sync(Session("s"), IncomingMessage("hi"))
    finally:
        TELEMETRY.disable()
    for metrics in (own, shared):
        assert metrics.counter("agentloop.system.failures", {"system": "Breaker"}) == 1
        assert len(metrics.observations("agentloop.turn.duration_ms")) == 1


def test_switching_on_after_the_loop_was_built_reaches_it() -> None:
    loop = AgentLoop([make_system("Breaker", 10, boom)])
    shared = InMemoryMetrics()
    TELEMETRY.enable(None, shared)
    try:
        loop.run_turn_sync(Session("s"), IncomingMessage("hi"))
    finally:
        TELEMETRY.disable()
    assert shared.counter("agentloop.system.failures", {"system": "Breaker"}) == 1


def test_spans_open_and_close_in_order_and_a_skipped_system_says_so(tracer: RecordingTracer) -> None:
    AgentLoop([make_system("First", 10), Skipped()]).run_turn_sync(Session("s"), IncomingMessage("hi"))
    assert tracer.log == ["start turn", "start system First", "end system First", "start system Skipped",
                          "end system Skipped", "end turn"]
    assert tracer.spans["system Skipped"].attributes["agentloop.outcome"] == "skipped"
    assert tracer.spans["turn"].attributes["agentloop.session.id"] == "s"


def test_a_system_past_the_deadline_is_a_timeout_span(tracer: RecordingTracer) -> None:
    async def slow(ctx: AgentContext) -> None:
        await asyncio.sleep(1)

    AgentLoop([make_system("Slow", 10, slow)], turn_timeout=0.05).run_turn_sync(Session("s"), IncomingMessage("hi"))
    span = tracer.spans["system Slow"]
    assert span.attributes["agentloop.outcome"] == "timeout"
    assert span.failure is not None and "deadline" in span.failure


def test_a_cancelled_turn_still_ends_its_spans(tracer: RecordingTracer) -> None:
    started = asyncio.Event()

    async def hang(ctx: AgentContext) -> None:
        started.set()
        await asyncio.sleep(60)

    loop = AgentLoop([make_system("Hang", 10, hang)])

    async def cancel_midway() -> None:
        turn = asyncio.create_task(loop.run_turn(Session("s"), IncomingMessage("hi")))
        await started.wait()
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn

    asyncio.run(cancel_midway())
    assert tracer.log == ["start turn", "start system Hang", "end system Hang", "end turn"]
    assert tracer.spans["system Hang"].attributes["agentloop.outcome"] == "cancelled"
    assert tracer.spans["turn"].failure == "the turn was cancelled"
