"""Tool approval: a tool call the user must approve before it runs, kept durably between turns.

When the model asks for a call that needs approval, the turn ends with an `ApprovalRequest`
(finish reason AWAITING_APPROVAL) and a `PendingApproval` is stored; the user's decision is
a turn of its own (`IncomingMessage.approval(...)`), which takes the pending call once,
runs it or tells the model it was denied, and continues the conversation.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs

from agentloop.messages import ChatMessage, ToolCall
from agentloop.scopes import Scope

if TYPE_CHECKING:
    from agentloop.context import AgentContext

ApprovalPolicy = Callable[["AgentContext", ToolCall], bool]
"""Decides per call whether `call` needs the user's approval this turn (True: it does)."""


APPROVAL_HINT = "approval_id"
"""The response hint naming the tool call a message asks the user to approve, so a channel can offer buttons for it."""


@attrs.frozen
class ApprovalRequest:
    """A tool call waiting for the user's decision, as the user is shown it."""

    approval_id: str
    tool: str
    arguments: dict[str, Any] = attrs.field(hash=False)
    session_id: str
    turn_id: str
    created_at: datetime


@attrs.frozen
class ApprovalDecision:
    """The user's answer to the pending call `approval_id`: approved or not, with an optional note for the model."""

    approval_id: str
    approved: bool
    note: str | None = None


@attrs.frozen
class PendingApproval:
    """What is stored while a call awaits approval: the request, the scope it belongs to, the id
    of the model's tool call, and the turn's model conversation up to that call, so the
    decision's turn resumes it exactly."""

    request: ApprovalRequest
    scope: Scope
    call_id: str
    messages: tuple[ChatMessage, ...]

    @property
    def call(self) -> ToolCall:
        """The tool call as the model made it."""
        return ToolCall(self.call_id, self.request.tool, dict(self.request.arguments))
