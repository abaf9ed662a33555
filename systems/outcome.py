"""Turn outcome finalization: one `TurnOutcome` built from what the tool loop produced."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from agentloop import (
    APPROVAL_HINT,
    AgentContext,
    ApprovalRequest,
    FailureKind,
    FinishReason,
    LlmFailure,
    LlmResponse,
    OutgoingResponse,
    PlanProposal,
    StreamedText,
    System,
    ToolLoopStop,
    TurnOutcome,
    resolve_finish_reason,
    visible_text,
)

DEFAULT_ERROR_TEXTS: Mapping[FailureKind, str] = {
    FailureKind.RATE_LIMIT: "I'm getting too many requests right now. Please try again in a minute.",
    FailureKind.TIMEOUT: "The model took too long to answer. Please try again.",
}
GENERIC_ERROR_TEXT = "Sorry, something went wrong while I was answering. Please try again."
CUT_STREAM_TEXT = "My answer was cut off before I could finish it. Please try again."
DEFAULT_STOP_TEXTS: Mapping[FinishReason, str] = {
    FinishReason.ITERATION_LIMIT: "I stopped after too many steps without finishing. Ask me to continue, or simplify the request.",
    FinishReason.DEADLINE: "I ran out of time before finishing. Please try again.",
    FinishReason.POLICY_DENIED: "I'm not allowed to do that here ({detail}).",
    FinishReason.AWAITING_APPROVAL: "Before I run {detail}, I need your approval: approve or deny it.",
    FinishReason.ERROR: "Sorry, {detail}.",
    FinishReason.INTERRUPTED: "I stopped this answer to read your newer message.",
    FinishReason.BUDGET_EXCEEDED: "I stopped because the usage budget for this conversation is used up. Please try again later.",
}


def render_call(name: str, arguments: Mapping[str, Any]) -> str:
    """A tool call as the user reads it: `name(key='value', ...)`."""
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"


def render_plan(plan: PlanProposal) -> str:
    """The plan as the user sees it: the model's words, then each proposed call."""
    steps = [f"{i}. {render_call(call.name, call.arguments)}" for i, call in enumerate(plan.tool_calls, start=1)]
    head = plan.text.strip() if plan.text and plan.text.strip() else "Here is what I would do:"
    return "\n".join([head, *steps])


def _outgoing(response: LlmResponse) -> OutgoingResponse:
    text, voice_text = visible_text(response.text), visible_text(response.voice_text)
    if voice_text is not None and text is not None and text.strip() == voice_text.strip():
        text = None
    return OutgoingResponse(text=text, voice_text=voice_text, attachments=response.attachments)


class TurnOutcomeFinalizationSystem(System):
    """Builds the turn's `TurnOutcome` (order 57), before routing and side effects.

    The finish reason is `resolve_finish_reason` over everything observed (I8). The
    model's final text (or its voice text when it only spoke) is `assistant_text`,
    the canonical answer. When there is none (an error, a stop), the user gets an
    explanatory text marked `fallback=True` and `assistant_text` stays None, so it is
    never stored (I5); when the user had already seen part of an answer that was cut off
    (`StreamedText` not complete), the text says so. A turn that stopped for the user's approval
    carries its `ApprovalRequest` as `approval`, and its text names the call, with the hint
    `APPROVAL_HINT` giving its approval id (a channel can offer buttons for it).
    Auto-mode turns always get an outcome, with nothing to send.
    With no input at all in a user turn it writes nothing: the feedback guarantee answers.
    An outcome an earlier system wrote (a custom system that answers by itself) is
    kept as it is: the one outcome of a turn is never replaced.
    """

    order: ClassVar[int] = 57
    reads = (LlmResponse, LlmFailure, ToolLoopStop, PlanProposal)
    optional_reads = (StreamedText, ApprovalRequest)
    writes = (TurnOutcome,)

    def __init__(
        self,
        *,
        error_texts: Mapping[FailureKind, str] = DEFAULT_ERROR_TEXTS,
        generic_error_text: str = GENERIC_ERROR_TEXT,
        stop_texts: Mapping[FinishReason, str] = DEFAULT_STOP_TEXTS,
        cut_stream_text: str = CUT_STREAM_TEXT,
    ) -> None:
        self.error_texts = dict(error_texts)
        self.generic_error_text = generic_error_text
        self.stop_texts = dict(stop_texts)
        self.cut_stream_text = cut_stream_text

    def should_process(self, ctx: AgentContext) -> bool:
        return ctx.turn_outcome is None

    def process(self, ctx: AgentContext) -> None:
        response, error = ctx.get(LlmResponse), ctx.get(LlmFailure)
        stop, plan = ctx.get(ToolLoopStop), ctx.get(PlanProposal)
        produced = not (response is None and error is None and stop is None and plan is None)
        if not produced and not ctx.auto_mode:
            return
        observed = [r for r, seen in ((FinishReason.ERROR, error), (FinishReason.PLAN_MODE, plan)) if seen is not None]
        if stop is not None:
            observed.append(stop.reason)
        if not produced:
            observed.append(FinishReason.ERROR)
        reason = resolve_finish_reason(observed)
        assistant_text: str | None = None
        outgoing: OutgoingResponse | None = None
        model = None
        if response is not None:
            outgoing = _outgoing(response)
            assistant_text = outgoing.text or response.voice_text
            model = response.model
        elif plan is not None:
            assistant_text = render_plan(plan)
            outgoing = OutgoingResponse.text_only(assistant_text)
        fallback = outgoing is None or outgoing.is_empty
        approval = ctx.get(ApprovalRequest)
        if fallback:
            hints = {APPROVAL_HINT: approval.approval_id} if approval is not None else {}
            outgoing = OutgoingResponse(text=self._explain(error, stop, ctx.get(StreamedText)), hints=hints)
        if error is not None:
            model = model or error.model
        ctx.set(
            TurnOutcome(
                finish_reason=reason,
                assistant_text=assistant_text or None,
                outgoing_response=None if ctx.auto_mode else outgoing,
                failures=ctx.failures,
                model=model,
                auto_mode=ctx.auto_mode,
                fallback=fallback and not ctx.auto_mode,
                approval=approval,
            )
        )

    def _explain(self, error: LlmFailure | None, stop: ToolLoopStop | None, streamed: StreamedText | None) -> str:
        if stop is not None and stop.reason in self.stop_texts:
            return self.stop_texts[stop.reason].format(detail=stop.detail)
        if streamed is not None and streamed.text and not streamed.complete:
            return self.cut_stream_text
        if error is not None:
            return self.error_texts.get(error.kind, self.generic_error_text)
        return self.generic_error_text
