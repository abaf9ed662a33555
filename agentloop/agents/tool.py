"""A bot as a tool of another: `agent_tool` runs one turn of a child bot in a child session of the
asking bot's, and its answer is the tool's result.

    billing = agent_tool("billing", "Answers questions about invoices and refunds.", billing_pipeline)
    triage = ToolLoopSystem(llm, [billing], approvals=stores.approvals)

The child turn runs inside the parent's tool call (`running_execution`), so its tool executions
are captured as children of that call in the parent session's trajectory, its model calls count
toward the parent turn's usage and budgets, and a call it holds back for approval reaches the
user through the parent (`EnclosingTurn`).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any, Protocol, runtime_checkable

import attrs

from agentloop._names import new_id
from agentloop.approvals import ApprovalRequest
from agentloop.components import LlmResponse, StructuredOutput, TurnUsage
from agentloop.context import AgentContext, IncomingMessage, Session
from agentloop.errors import AgentloopError, PipelineError
from agentloop.loop import AgentLoop
from agentloop.system import System
from agentloop.tools import Tool, enclosing_turn, tool

__all__ = ["DEFAULT_MAX_CALLS", "DEFAULT_MAX_DEPTH", "AgentToolError", "BotSource", "Builder", "agent_tool", "child_session"]

DEFAULT_MAX_DEPTH = 3
"""How many bots deep below the first a chain of agent tools may reach."""
DEFAULT_MAX_CALLS = 4
"""How many times one turn of the parent may ask one agent tool."""
TURNS_REMEMBERED = 1024
"""The parent turns whose calls an agent tool counts (the most recent): enough for the turns in flight."""



class Builder(Protocol):
    """A bot not built yet (a `StandardPipeline`): `build()` makes its `AgentLoop`."""

    def build(self) -> AgentLoop: ...


@runtime_checkable
class _Buildable(Protocol):
    def build(self) -> Any: ...


BotSource = AgentLoop | Builder | Callable[[], Any]
"""A built bot, a builder (`build()`), or a function without arguments that builds one: it returns
an `AgentLoop`, a sequence of systems or a builder."""

_BUILDING: ContextVar[tuple[tuple[str, object], ...]] = ContextVar("agentloop_agents_building", default=())
_DEPTH: ContextVar[int] = ContextVar("agentloop_agent_depth", default=0)


class AgentToolError(RuntimeError, AgentloopError):
    """A bot asked as a tool gave no answer (it failed, or a limit stopped it); the asking bot's tool call fails with it."""


def child_session(parent: Session, name: str) -> Session:
    """The session the agent `name` answers `parent`'s questions in: the same tenant chain, user and
    channel, its own id (the same for every call, so a second question continues it) and `parent_id` the parent's."""
    return Session(
        f"{parent.id}/{name}", user_id=parent.user_id, project_id=parent.project_id, team_id=parent.team_id,
        org_id=parent.org_id, channel=parent.channel, parent_id=parent.id,
    )


@contextlib.contextmanager
def _building(name: str, source: object, max_depth: int) -> Iterator[None]:
    """Build the child `name` from `source` with the chain of agents being built checked for a cycle and its depth."""
    chain = _BUILDING.get()
    names = [built for built, _ in chain] + [name]
    if any(built == name or built_from is source for built, built_from in chain):
        raise PipelineError(
            f"the agent tools form a cycle: {' -> '.join(names)}; a bot may not ask itself, directly or through "
            "other bots (hand the conversation over with a handoff instead)"
        )
    if len(chain) >= max_depth:
        raise PipelineError(
            f"the agent tools nest {len(names)} bots deep ({' -> '.join(names)}), more than max_depth={max_depth}"
        )
    token = _BUILDING.set((*chain, (name, source)))
    try:
        yield
    finally:
        _BUILDING.reset(token)


def _build(name: str, source: BotSource, max_depth: int) -> AgentLoop:
    if isinstance(source, AgentLoop):
        return source
    with _building(name, source, max_depth):
        built: Any = source.build() if isinstance(source, _Buildable) else source()
        if isinstance(built, _Buildable):
            built = built.build()
    if isinstance(built, Sequence) and all(isinstance(s, System) for s in built):
        built = AgentLoop(built)
    if not isinstance(built, AgentLoop):
        raise PipelineError(
            f"agent {name!r}: its factory returned {type(built).__name__}; return an AgentLoop, a list of systems or a builder"
        )
    return built


@attrs.define
class _Agent:
    """One agent tool's child bot and limits, and how often each recent parent turn asked it."""

    name: str
    loop: AgentLoop
    max_depth: int
    max_calls: int
    calls: OrderedDict[str, int] = attrs.Factory(OrderedDict)

    def count(self, turn_id: str) -> None:
        """Count one call in parent turn `turn_id`; `AgentToolError` past `max_calls`."""
        made = self.calls.pop(turn_id, 0) + 1
        self.calls[turn_id] = made
        while len(self.calls) > TURNS_REMEMBERED:
            self.calls.popitem(last=False)
        if made > self.max_calls:
            raise AgentToolError(f"the agent {self.name!r} was asked {self.max_calls} times this turn, its limit (max_calls)")

    async def ask(self, question: str) -> Any:
        """Run one turn of the child for `question` (or the user's decision it waits for); its answer."""
        parent = enclosing_turn()
        depth = _DEPTH.get() + 1
        if depth > self.max_depth:
            raise AgentToolError(f"the agent {self.name!r} would run {depth} bots deep, more than max_depth={self.max_depth}")
        if parent is None:
            session, incoming = Session(f"agent/{self.name}/{new_id()}"), IncomingMessage(question, auto_mode=True)
        else:
            self.count(parent.turn_id)
            session = child_session(parent.session, self.name)
            decision = parent.decision
            incoming = IncomingMessage(question, auto_mode=True)
            if decision is not None:
                incoming = attrs.evolve(IncomingMessage.approval(decision.approval_id, approved=decision.approved, note=decision.note), auto_mode=True)
        token = _DEPTH.set(depth)
        try:
            ctx = await self.loop.run_turn(session, incoming)
        finally:
            _DEPTH.reset(token)
        usage = ctx.get(TurnUsage)
        if parent is not None and usage is not None:
            await parent.spend(usage.calls)
        return self._answer(ctx)

    def _answer(self, ctx: AgentContext) -> Any:
        """The child's answer: its structured output, its final text, or the approval it waits for."""
        structured = ctx.get(StructuredOutput)
        if structured is not None:
            return structured.value
        response = ctx.get(LlmResponse)
        if response is not None:
            return response.text
        request = ctx.get(ApprovalRequest)
        parent = enclosing_turn()
        if request is not None and parent is not None:
            if not parent.await_approval(request):
                raise AgentToolError(
                    f"the agent {self.name!r} waits for the user's approval of {request.tool}, but another call awaits "
                    f"the user's approval; ask again after it is decided"
                )
            return f"the agent {self.name!r} waits for the user's approval of {request.tool}"
        outcome = ctx.turn_outcome
        if outcome is not None and outcome.assistant_text is not None and not outcome.fallback:
            return outcome.assistant_text
        reasons = "; ".join(f.message for f in ctx.failures) or "it gave no answer"
        finish = f" ({outcome.finish_reason.value})" if outcome is not None else ""
        raise AgentToolError(f"the agent {self.name!r} did not answer{finish}: {reasons}")


def agent_tool(
    name: str,
    description: str,
    bot: BotSource,
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_calls: int = DEFAULT_MAX_CALLS,
) -> Tool:
    """A tool that asks the bot `bot` (built, a builder or a function that builds it, built now) one question.

    Each call runs one turn of the child in `child_session` (its own history, pipeline, model,
    tools and limits); its structured output or final text is the tool's result, and a turn that
    gives neither fails the call (`AgentToolError`), which the parent's model is told. A chain
    of agents deeper than `max_depth`, or a cycle (A asks B asks A), is refused when it is built
    (`PipelineError`); one parent turn asks this agent at most `max_calls` times.
    """
    if max_depth < 1 or max_calls < 1:
        raise ValueError(f"max_depth and max_calls must be at least 1, got {max_depth} and {max_calls}")
    agent = _Agent(name, _build(name, bot, max_depth), max_depth, max_calls)

    async def ask(question: str) -> Any:
        """Ask the agent.

        Args:
            question: the question or task for the agent, with everything it needs to know.
        """
        return await agent.ask(question)

    return attrs.evolve(tool(name=name, description=description)(ask), nested_approval=True)
