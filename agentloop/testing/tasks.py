"""Test kit for task templates: a system that answers task turns without a model."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentloop.context import AgentContext
from agentloop.loop import AgentLoop
from agentloop.outcome import FinishReason, TurnOutcome
from agentloop.system import System
from agentloop.tasks.turn import TaskTurn

__all__ = ["TaskReplySystem", "task_loop"]

Reply = Callable[[TaskTurn], str]


class TaskReplySystem(System):
    """Answers each task turn with `reply(turn)` (or the next of a list of replies) as an
    auto-mode `TurnOutcome`, and records every `TaskTurn` and prompt it was given."""

    order = 30
    reads = (TaskTurn,)
    writes = (TurnOutcome,)

    def __init__(self, reply: Reply | Sequence[str]) -> None:
        self._reply = reply
        self._next = 0
        self.turns: list[TaskTurn] = []
        self.prompts: list[str] = []

    def process(self, ctx: AgentContext) -> None:
        turn = ctx.require(TaskTurn)
        self.turns.append(turn)
        self.prompts.append(ctx.incoming.text)
        if callable(self._reply):
            text = self._reply(turn)
        else:
            if self._next >= len(self._reply):
                raise LookupError(f"TaskReplySystem has no reply left for turn {self._next + 1}")
            text = self._reply[self._next]
            self._next += 1
        ctx.set(TurnOutcome(FinishReason.SUCCESS, assistant_text=text, auto_mode=True))


def task_loop(reply: Reply | Sequence[str]) -> tuple[AgentLoop, TaskReplySystem]:
    """An `AgentLoop` whose only system answers task turns with `reply`, and that system."""
    system = TaskReplySystem(reply)
    return AgentLoop([system], inputs=(TaskTurn,)), system
