"""The state of one run of the tool loop (`ToolTurn`): the conversation so far, the calls made,
the usage spent, and the user's message the answer streams into."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs

from agentloop import (
    AgentContext,
    ApprovalDecision,
    Attachment,
    CallUsage,
    ChatMessage,
    FailureEvent,
    FailureKind,
    FailureSource,
    FinishReason,
    InboxTurn,
    ModelSwitched,
    PromptContext,
    StreamedText,
    ToolCall,
    ToolExecution,
    ToolLoopStop,
    TransportError,
    TurnUsage,
)
from agentloop._log import get_logger
from agentloop._names import new_id
from agentloop._text import storable
from agentloop.ports import MessageStream, StreamingChannel
from systems.input import turn_user_text
from systems.routing import UNDELIVERED_TEXT

if TYPE_CHECKING:
    from systems.nested import NestedApproval

_log = get_logger("agentloop.tool_loop")


@attrs.frozen
class RanCall:
    """One tool call's run, kept until the step's runs are put on the turn in call order."""

    call: ToolCall
    execution: ToolExecution
    result: Any
    failure: tuple[FailureKind, str] | None


class ToolTurn:
    """The mutable state of one run of the tool loop: its messages, calls, usage and the message it streams to."""

    def __init__(self, ctx: AgentContext, prompt: PromptContext, system: str, stream_to: StreamingChannel | None) -> None:
        self.ctx = ctx
        self.system = system
        self.messages: list[ChatMessage] = list(prompt.to_messages())
        self.llm_calls = 0
        self.executions: list[ToolExecution] = []
        self.voice_text: str | None = None
        self.attachments: list[Attachment] = []
        self.usage = TurnUsage()
        self.stream_to = stream_to
        self.message: MessageStream | None = None
        self.message_id = ""
        self.shown = ""
        self.repaired = False
        self.awaiting: ToolCall | None = None
        """The call of this model step that needs the user's approval, once `_admit` met one."""
        self.nested: NestedApproval | None = None
        """A call that a turn run inside one of this step's tools holds back for the user's approval."""
        self.resumes: ApprovalDecision | None = None
        """The user's decision the call being run again (by `_resume`) answers."""

    def fail(self, source: FailureSource, component: str, kind: FailureKind, message: str) -> None:
        self.ctx.add_failure(FailureEvent(source, component, kind, message, self.ctx.clock.now()))

    def add_usage(self, call: CallUsage) -> None:
        """Count one model call's usage, on the turn at once: a turn that ends in a failure spent it too."""
        self.usage = self.usage.add(call)
        self.ctx.set(self.usage)

    async def show(self, text: str) -> None:
        """Stream `text` to the user's message, opening it on the first delta; a channel
        that fails is a TRANSPORT failure and gets no more deltas this turn."""
        channel = self.stream_to
        if channel is None or not text:
            return
        try:
            if self.message is None:
                inbox = self.ctx.get(InboxTurn)
                if inbox is not None and not await inbox.deliveries.claim_delivery(inbox.message_id, inbox.attempt):
                    self.stream_to = None  # an earlier run of this message delivered its reply: show nothing again
                    return
                self.message = await channel.open_stream(self.ctx.session, {})
                self.message_id = new_id()
                self.record(complete=False)
            await self.message.delta(text)
        except Exception as exc:
            self.stream_to = None
            message = str(exc) if isinstance(exc, TransportError) and str(exc) else UNDELIVERED_TEXT
            self.fail(FailureSource.TRANSPORT, self.system, FailureKind.EXCEPTION, message)
            _log.warning("stream.delta_failed", turn_id=self.ctx.turn_id, exc_info=exc)
            return
        self.shown += text
        self.record(complete=False)

    async def switched(self, event: ModelSwitched) -> None:
        """A fallback to another model: a failure of the turn's, and what the failed model had
        shown withdrawn (the next model's text opens a new message)."""
        self.fail(FailureSource.LLM, self.system, event.kind, event.message)
        if not event.withdrawn or self.message is None:
            return
        try:
            await self.message.abort(f"model {event.failed!r} failed; {event.next_model!r} answers instead")
        except Exception as exc:
            message = str(exc) if isinstance(exc, TransportError) and str(exc) else UNDELIVERED_TEXT
            self.fail(FailureSource.TRANSPORT, self.system, FailureKind.EXCEPTION, message)
            _log.warning("stream.abort_failed", turn_id=self.ctx.turn_id, exc_info=exc)
        self.ctx.set(StreamedText(self.message_id, "", True))
        self.message, self.shown = None, ""

    def record(self, *, complete: bool) -> None:
        """Put what the user's message shows on the turn, if a message was opened."""
        if self.message is not None:
            self.ctx.set(StreamedText(self.message_id, self.shown, complete, self.message))

    def stop(self, reason: FinishReason, detail: str) -> None:
        self.ctx.set(ToolLoopStop(reason, detail, self.llm_calls, len(self.executions)))


def execution_of(
    ctx: AgentContext, call: ToolCall, step_id: str, execution_id: str, parent_id: str | None,
    started_at: datetime, duration_ms: float, result: str | None, error: str | None,
) -> ToolExecution:
    """What a tool call did, as note-taking captures it: the tenant chain, the turn and its outcome."""
    session = ctx.session
    return ToolExecution(
        id=execution_id,
        tool_name=storable(call.name),
        arguments=dict(call.arguments),
        started_at=started_at,
        duration_ms=duration_ms,
        session_id=session.id,
        result=result,
        error=error,
        parent_id=parent_id,
        user_id=session.user_id,
        project_id=session.project_id,
        context_snapshot={
            "turn_id": ctx.turn_id,
            "user_message": turn_user_text(ctx)[:500],
        },
        org_id=session.org_id,
        team_id=session.team_id,
        step_id=step_id,
    )
