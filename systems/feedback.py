"""The feedback guarantee: a user turn never ends in silence."""

from __future__ import annotations

from typing import ClassVar

import attrs

from agentloop import AgentContext, FinishReason, OutgoingResponse, System, TurnOutcome

DEFAULT_FALLBACK_TEXT = "Sorry, I couldn't answer that just now. Please try again."
DEFAULT_DEADLINE_TEXT = "Sorry, I ran out of time on that one. Please try again."


class FeedbackGuaranteeSystem(System):
    """Gives a user turn a fallback response when it has none to send (order 59, always_run).

    It never replaces a response with content (I3), does nothing in auto mode, marks
    what it creates `fallback=True`, and never touches history or stores (I4). An
    outcome it has to create has finish reason ERROR (DEADLINE once the turn ran out).
    """

    order: ClassVar[int] = 59
    always_run: ClassVar[bool] = True
    reads = (TurnOutcome,)
    writes = (TurnOutcome,)

    def __init__(self, *, text: str = DEFAULT_FALLBACK_TEXT, deadline_text: str = DEFAULT_DEADLINE_TEXT) -> None:
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
