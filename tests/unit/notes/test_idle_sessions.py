"""IdleSessions: sessions nobody speaks in are ended (distilled) after the idle time, once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentloop import LlmReply, LlmRequest, Session
from agentloop.adapters import open_note_taking
from agentloop.notes import DistillationStatus, IdleSessions, NoteTaking
from agentloop.testing import FakeClock
from agentloop.testing.notes import make_executions

REPLY = "## Context\nCI was red.\n## Solution\nPin the tool versions.\n## Key Patterns\nPin versions in CI.\n## Tags\nci"
ADA = Session("s1", user_id="ada", project_id="p1")
BOB = Session("s2", user_id="bob", project_id="p1")


class Model:
    def __init__(self) -> None:
        self.requests: list[LlmRequest] = []

    async def complete(self, request: LlmRequest) -> LlmReply:
        self.requests.append(request)
        return LlmReply(content=REPLY, model="m")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def model() -> Model:
    return Model()


@pytest.fixture
def notes(tmp_path: Path, model: Model, clock: FakeClock) -> Iterator[NoteTaking]:
    with open_note_taking(tmp_path, model, clock=clock) as note_taking:
        yield note_taking


def _work(notes: NoteTaking, session: Session, tools: list[str]) -> None:
    """The session ran these tools (captured as a turn would)."""
    for execution in make_executions(tools, session_id=session.id, user_id=session.user_id, project_id=session.project_id):
        notes.capture(execution)


def test_a_session_idle_longer_than_the_idle_time_is_distilled_once(notes: NoteTaking, clock: FakeClock, model: Model) -> None:
    idle = IdleSessions(notes, idle_after=600, clock=clock)
    _work(notes, ADA, ["lint", "test", "pin"])
    idle.touch(ADA)
    clock.advance(300)
    idle.touch(BOB)
    clock.advance(301)
    (result,) = asyncio.run(idle.end_idle())
    assert result.status is DistillationStatus.STORED and result.note is not None
    assert len(idle) == 1, "bob spoke 301 s ago and is still watched"
    assert asyncio.run(idle.end_idle()) == [] and len(model.requests) == 1


def test_a_turn_keeps_a_session_alive(notes: NoteTaking, clock: FakeClock) -> None:
    idle = IdleSessions(notes, idle_after=600, clock=clock)
    for _ in range(3):
        idle.touch(ADA)
        clock.advance(500)
    assert asyncio.run(idle.end_idle()) == [] and len(idle) == 1


def test_a_session_whose_last_turn_failed_ends_unsuccessful_and_is_not_distilled(
    notes: NoteTaking, clock: FakeClock, model: Model
) -> None:
    idle = IdleSessions(notes, idle_after=60, clock=clock)
    _work(notes, ADA, ["lint", "test", "pin"])
    idle.touch(ADA, success=False)
    clock.advance(61)
    (result,) = asyncio.run(idle.end_idle())
    assert result.status is DistillationStatus.SKIPPED and model.requests == []


def test_ending_twice_is_harmless(notes: NoteTaking, clock: FakeClock, model: Model) -> None:
    """An explicit end, then the idle ending, then another explicit end: one note."""
    idle = IdleSessions(notes, idle_after=60, clock=clock)
    _work(notes, ADA, ["lint", "test", "pin"])
    idle.touch(ADA)
    first = asyncio.run(idle.end(ADA))
    clock.advance(61)
    assert asyncio.run(idle.end_idle()) == [], "an ended session is no longer watched"
    again = asyncio.run(idle.end(ADA))
    assert first.status is DistillationStatus.STORED
    assert again.status is DistillationStatus.SKIPPED and len(model.requests) == 1


def test_the_background_task_ends_idle_sessions_until_stopped(notes: NoteTaking, clock: FakeClock) -> None:
    async def scenario() -> tuple[int, int]:
        idle = IdleSessions(notes, idle_after=60, check_every=0.01, clock=clock)
        async with idle:
            idle.touch(ADA)
            clock.advance(61)
            for _ in range(500):
                if not len(idle):
                    break
                await asyncio.sleep(0.01)
            ended = len(idle)
        idle.touch(BOB)
        clock.advance(61)
        await asyncio.sleep(0.05)
        return ended, len(idle)

    assert asyncio.run(scenario()) == (0, 1), "stopped: bob is not ended"


def test_an_idle_time_that_is_not_positive_is_refused(notes: NoteTaking) -> None:
    with pytest.raises(ValueError, match="idle_after must be a positive number of seconds, not 0"):
        IdleSessions(notes, idle_after=0)
