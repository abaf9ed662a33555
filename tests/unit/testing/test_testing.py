"""The public test kit in agentloop.testing."""

from __future__ import annotations

from datetime import timedelta

import attrs
import pytest

from agentloop import AgentContext, MissingComponentError, Session, System
from agentloop.testing import FakeClock, make_context, make_system, run_pipeline, run_system, run_system_sync


@attrs.frozen
class Name:
    value: str


class Greeter(System):
    order = 10
    reads = (Name,)
    writes = (Name,)

    def should_process(self, ctx: AgentContext) -> bool:
        return ctx.incoming.text != "skip"

    def process(self, ctx: AgentContext) -> None:
        ctx.set(Name("hello " + ctx.require(Name).value))


class AsyncGreeter(Greeter):
    async def process(self, ctx: AgentContext) -> None:
        Greeter.process(self, ctx)


def test_fake_clock_moves_only_when_told() -> None:
    clock = FakeClock()
    start, mono = clock.now(), clock.monotonic()
    clock.advance(1.5)
    assert clock.now() - start == timedelta(seconds=1.5)
    assert clock.monotonic() - mono == 1.5
    with pytest.raises(ValueError, match="never goes back"):
        clock.advance(-1)


def test_make_context_defaults() -> None:
    ctx = make_context("hi", components=[Name("x")])
    assert (ctx.incoming.text, ctx.session.id, ctx.session.user_id) == ("hi", "test-session", "test-user")
    assert ctx.get(Name) == Name("x") and ctx.deadline is None
    assert isinstance(ctx.clock, FakeClock)


def test_make_context_with_timeout_sets_a_deadline_on_its_clock() -> None:
    clock = FakeClock()
    ctx = make_context(clock=clock, timeout=3)
    assert ctx.deadline == clock.monotonic() + 3


@pytest.mark.parametrize("greeter", [Greeter(), AsyncGreeter()])
def test_run_system_runs_sync_and_async_systems(greeter: System) -> None:
    ctx = make_context(components=[Name("ada")])
    assert run_system_sync(greeter, ctx) is True
    assert ctx.get(Name) == Name("hello ada")
    assert ctx.current_system is None


def test_run_system_reports_a_declined_turn() -> None:
    ctx = make_context("skip", components=[Name("ada")])
    assert run_system_sync(Greeter(), ctx) is False
    assert ctx.get(Name) == Name("ada")


def test_run_system_lets_exceptions_propagate_with_the_system_named() -> None:
    with pytest.raises(MissingComponentError, match="'Greeter' requires a Name"):
        run_system_sync(Greeter(), make_context())


def test_run_system_is_awaitable() -> None:
    import asyncio

    ctx = make_context(components=[Name("bo")])
    assert asyncio.run(run_system(AsyncGreeter(), ctx))
    assert ctx.get(Name) == Name("hello bo")


def test_run_pipeline_runs_one_turn() -> None:
    ctx = run_pipeline([Greeter()], "hi", session=Session("s9"), inputs=(Name,), components=[Name("cy")])
    assert ctx.session.id == "s9" and ctx.get(Name) == Name("hello cy") and ctx.failures == ()


def test_make_system_builds_a_named_declared_system() -> None:
    seen: list[str] = []
    made = make_system("Recorder", 7, lambda ctx: seen.append(ctx.incoming.text), reads=(Name,), writes=(Name,), always_run=True)
    assert (made.name, made.order, made.reads, made.writes, made.always_run) == ("Recorder", 7, (Name,), (Name,), True)
    assert type(made).__name__ == "Recorder"
    run_system_sync(made, make_context("ping"))
    assert seen == ["ping"]


def test_make_system_with_an_async_action_is_an_async_system() -> None:
    import inspect

    async def act(ctx: AgentContext) -> None:
        ctx.set(Name("async"))

    made = make_system("Async", 1, act, writes=(Name,))
    assert inspect.iscoroutinefunction(made.process)
    ctx = make_context()
    run_system_sync(made, ctx)
    assert ctx.get(Name) == Name("async")


def test_prompt_writer_stands_in_for_context_building() -> None:
    from agentloop import ChatMessage, PromptContext
    from agentloop.testing import PromptWriter

    ctx = make_context("hi")
    run_system_sync(PromptWriter("Be brief."), ctx)
    assert ctx.require(PromptContext) == PromptContext("Be brief.", (ChatMessage.user("hi"),))
