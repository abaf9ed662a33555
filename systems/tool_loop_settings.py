"""What the tool loop may do in a turn: `ToolLoopSettings` and the hook types its fields take."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

import attrs

from agentloop import DEFAULT_COMPANY, AgentContext, ApprovalPolicy, Budgets, ToolCall, ToolExecution

__all__ = [
    "DEFAULT_MAX_TOOL_OUTPUT_BYTES",
    "SettingsKeywords",
    "ToolExecutionHook",
    "ToolLoopSettings",
    "ToolPolicy",
    "plan_mode_requested",
]

ToolPolicy = Callable[[AgentContext, ToolCall], "str | None"]
"""Returns why `call` is denied for this turn, or None to allow it."""
ToolExecutionHook = Callable[[ToolExecution], None]
"""Called synchronously right after each tool finishes; must not block."""

DEFAULT_MAX_TOOL_OUTPUT_BYTES = 64 * 1024


def plan_mode_requested(ctx: AgentContext) -> bool:
    """The default plan-mode switch: the message's metadata has `plan_mode="true"`."""
    return ctx.incoming.metadata.get("plan_mode") == "true"


@attrs.frozen
class ToolLoopSettings:
    """What the tool loop may do in a turn; every field has a working default.

    `policy(ctx, call)` returns a reason to deny a call, or None; `approval(ctx, call)` says
    whether a call waits for the user's approval (default: the tool's `requires_approval`).
    """

    max_llm_calls: int = attrs.field(default=8, validator=attrs.validators.ge(1))
    max_tool_executions: int = attrs.field(default=16, validator=attrs.validators.ge(0))
    plan_mode: bool | Callable[[AgentContext], bool] = plan_mode_requested
    policy: ToolPolicy | None = None
    on_tool_execution: ToolExecutionHook | None = None
    voice: bool = True
    """Offer the model the `send_voice` tool."""
    model: str | None = None
    temperature: float | None = None
    max_tool_output_bytes: int = attrs.field(default=DEFAULT_MAX_TOOL_OUTPUT_BYTES, validator=attrs.validators.ge(1))
    """A tool's output beyond this many UTF-8 bytes is cut (the cut marked) before the model or capture sees it."""
    output_type: type[Any] | None = None
    """Validate the final answer into this type; `StructuredOutput` holds it."""
    approval: ApprovalPolicy | None = None
    company_id: str = DEFAULT_COMPANY
    budgets: Budgets = Budgets()
    """Token and cost limits per turn, session and tenant chain; the loop stops a turn BUDGET_EXCEEDED before passing one."""


class SettingsKeywords(TypedDict, total=False):
    """The settings `ToolLoopSystem` took one keyword each before `ToolLoopSettings` (deprecated)."""

    max_llm_calls: int
    max_tool_executions: int
    plan_mode: bool | Callable[[AgentContext], bool]
    policy: ToolPolicy | None
    on_tool_execution: ToolExecutionHook | None
    voice: bool
    model: str | None
    temperature: float | None
    max_tool_output_bytes: int
    output_type: type[Any] | None
    approval: ApprovalPolicy | None
    company_id: str
