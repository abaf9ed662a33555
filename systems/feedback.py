"""The feedback guarantee: a user turn never ends in silence."""

from __future__ import annotations

from typing import ClassVar

import attrs

from agentloop import AgentContext, FinishReason, OutgoingResponse, System, TurnOutcome

from systems.outcome import DEFAULT_STOP_TEXTS, GENERIC_ERROR_TEXT


class FeedbackGuaranteeSystem(System):
    """Gives a user turn a fallback response when it has none to send (order 59, always_run).

    A response of only whitespace is none. It never replaces a response with content
    (I3) and changes nothing else on the outcome, does nothing in auto mode, marks
    what it creates `fallback=True`, and never touches history or stores (I4). Its
    texts default to the finalization system's, so a user hears one wording. An
    outcome it has to create has finish reason ERROR (DEADLINE once the turn ran out).
    """

    order: ClassVar[int] = 59
    always_run: ClassVar[bool] = True
    reads = (TurnOutcome,)
    writes = (TurnOutcome,)

    def __init__(
        self, *, text: str = GENERIC_ERROR_TEXT, deadline_text: str = DEFAULT_STOP_TEXTS[FinishReason.DEADLINE]
    ) -> None:
        if not text.strip() or not deadline_text.strip():
            raise ValueError("a fallback must say something: text and deadline_text may not be blank")
        self.text = text
        self.deadline_text = deadline_text

    def process(self, ctx: AgentContext) -> None:
        if ctx.auto_mode:
            return
        outcome = ctx.turn_outcome
        if outcome is not None and outcome.outgoing_response is not None and not outcome.outgoing_response.is_empty:
            return
        late = ctx.deadline_passed()
        response = OutgoingResponse.text_only(self.deadline_text if late else self.text)
        if outcome is None:
            reason = FinishReason.DEADLINE if late else FinishReason.ERROR
            ctx.set(TurnOutcome(reason, outgoing_response=response, failures=ctx.failures, fallback=True))
        else:
            ctx.set(attrs.evolve(outcome, outgoing_response=response, fallback=True))
