"""The public test kit: build a turn context, run a system or a pipeline, fake the clock.

Our own tests use exactly this; so can yours. Hypothesis strategies for the contracts
are in `agentloop.testing.strategies` (imported separately: hypothesis is a test extra).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence

from agentloop.adapters.channels.recording import RecordedStream, RecordingChannel, Sent
from agentloop.adapters.llm.scripted import ScriptedLLM, StreamCut
from agentloop.components import PromptContext
from agentloop.context import AgentContext, IncomingMessage, Session
from agentloop.loop import AgentLoop
from agentloop.messages import ChatMessage
from agentloop.ports.clock import Clock, FakeClock
from agentloop.system import System

__all__ = [
    "FakeClock",
    "PromptWriter",
    "RecordedStream",
    "RecordingChannel",
    "ScriptedLLM",
    "Sent",
    "StreamCut",
    "make_context",
    "make_system",
    "run_pipeline",
    "run_system",
    "run_system_sync",
]


class PromptWriter(System):
    """Stands in for context building (order 20): a system prompt and the user's message.

    For testing systems that read or extend `PromptContext` without the stores that
    `ContextBuildingSystem` needs.
    """

    order = 20
    writes = (PromptContext,)

    def __init__(self, system_prompt: str = "You are a helpful assistant.") -> None:
        self.system_prompt = system_prompt

    def process(self, ctx: AgentContext) -> None:
        ctx.set(PromptContext(self.system_prompt, (ChatMessage.user(ctx.incoming.text),)))


def make_context(
    text: str = "hello",
    *,
    session: Session | None = None,
    incoming: IncomingMessage | None = None,
    auto_mode: bool = False,
    history: Sequence[ChatMessage] = (),
    components: Iterable[object] = (),
    clock: Clock | None = None,
    timeout: float | None = None,
) -> AgentContext:
    """A turn context for testing one system: session `test-session`, message `text`."""
    clock = clock or FakeClock()
    return AgentContext(
        session or Session("test-session", user_id="test-user"),
        incoming or IncomingMessage(text, auto_mode=auto_mode),
        history=history,
        deadline=None if timeout is None else clock.monotonic() + timeout,
        clock=clock,
        components=components,
    )


def make_system(
    name: str,
    order: int,
    action: Callable[[AgentContext], None | Awaitable[None]] = lambda ctx: None,
    *,
    reads: tuple[type, ...] = (),
    optional_reads: tuple[type, ...] = (),
    writes: tuple[type, ...] = (),
    always_run: bool = False,
) -> System:
    """A one-off system whose `process` calls `action(ctx)`: for tests that need many.

    The system's class is named `name`, so failures and errors name it too; an async
    `action` makes an async system. Like any system, `action` may touch only the types
    it declares.
    """
    if inspect.iscoroutinefunction(action):

        async def process(self: System, ctx: AgentContext) -> None:
            await action(ctx)

    else:

        def process(self: System, ctx: AgentContext) -> None:  # type: ignore[misc]
            action(ctx)

    namespace = {
        "order": order,
        "reads": reads,
        "optional_reads": optional_reads,
        "writes": writes,
        "always_run": always_run,
        "process": process,
    }
    cls: type[System] = type(name, (System,), namespace)
    return cls()


async def run_system(system: System, ctx: AgentContext) -> bool:
    """Run one system on `ctx` as the loop would, but let its exceptions propagate.

    Returns False when `should_process` declined the turn, True when `process` ran.
    As in the loop, an access outside the system's declaration raises
    `UndeclaredAccessError`; afterwards the check that was on before (none, or that of a
    system running this one) holds again.
    """
    with ctx._running(system):
        if not system.should_process(ctx):
            return False
        result = system.process(ctx)
        if inspect.isawaitable(result):
            await result
        return True


def run_system_sync(system: System, ctx: AgentContext) -> bool:
    """`run_system` for synchronous tests."""
    return asyncio.run(run_system(system, ctx))


def run_pipeline(
    systems: Sequence[System],
    text: str = "hello",
    *,
    session: Session | None = None,
    auto_mode: bool = False,
    history: Sequence[ChatMessage] = (),
    components: Iterable[object] = (),
    inputs: Iterable[type] = (),
    turn_timeout: float | None = None,
    clock: Clock | None = None,
) -> AgentContext:
    """Build an `AgentLoop` of `systems` and run one turn of `text` synchronously."""
    loop = AgentLoop(systems, turn_timeout=turn_timeout, inputs=inputs, clock=clock)
    return loop.run_turn_sync(
        session or Session("test-session", user_id="test-user"),
        IncomingMessage(text, auto_mode=auto_mode),
        history=history,
        components=components,
    )
