"""What the tool loop offers a turn run inside one of its tools (`NestedTurn`, an `EnclosingTurn`):
a bot asked as a tool is captured in the asking turn's trajectory, spends from its budgets and
reaches its user for an approval."""

from __future__ import annotations

from collections.abc import Callable

import attrs

from agentloop import (
    ApprovalDecision,
    ApprovalRequest,
    CallUsage,
    EnclosingTurn,
    Session,
    ToolCall,
    ToolExecution,
)
from agentloop._log import get_logger

from systems.budgets import BudgetGuard
from systems.tool_loop_settings import ToolExecutionHook
from systems.tool_turn import ToolTurn

_log = get_logger("agentloop.tool_loop")

INNER_SESSION = "inner_session_id"
"""The context snapshot key naming the session an inner turn's execution ran in, once it is captured
in the enclosing session's trajectory."""


@attrs.frozen
class NestedApproval:
    """A call an inner turn holds back for the user's approval, and the tool call of the enclosing turn it ran in."""

    call: ToolCall
    request: ApprovalRequest


class NestedTurn:
    """The enclosing side of one tool call: `turn` of a tool loop whose hook is `hook()` and budget `budget`."""

    def __init__(
        self,
        turn: ToolTurn,
        call: ToolCall,
        hook: Callable[[], ToolExecutionHook | None],
        budget: BudgetGuard | None,
        outer: EnclosingTurn | None,
        decision: ApprovalDecision | None = None,
    ) -> None:
        self.turn, self.call, self.hook, self.budget, self.outer = turn, call, hook, budget, outer
        self._decision = decision

    @property
    def session(self) -> Session:
        return self.turn.ctx.session

    @property
    def turn_id(self) -> str:
        return self.turn.ctx.turn_id

    @property
    def decision(self) -> ApprovalDecision | None:
        return self._decision

    def capture(self, execution: ToolExecution) -> None:
        """Hand the execution to the turns enclosing this one first, then to this loop's hook under this session:
        a recorder that sees an execution twice keeps the first, the outermost session's."""
        if self.outer is not None:
            self.outer.capture(execution)
        hook = self.hook()
        if hook is None:
            return
        mine = self.session.id
        if execution.session_id != mine:
            snapshot = {INNER_SESSION: execution.session_id, **execution.context_snapshot}
            execution = attrs.evolve(execution, session_id=mine, context_snapshot=snapshot)
        try:
            hook(execution)
        except Exception as exc:
            _log.error("tool.hook_failed", tool=execution.tool_name, turn_id=self.turn.ctx.turn_id, exc_info=exc)

    async def spend(self, calls: tuple[CallUsage, ...]) -> None:
        for call in calls:
            self.turn.add_usage(call)
        if self.budget is not None and calls:
            await self.budget.charge(self.turn.ctx, calls)

    def await_approval(self, request: ApprovalRequest) -> bool:
        if self.turn.nested is not None:
            return False
        self.turn.nested = NestedApproval(self.call, request)
        return True
