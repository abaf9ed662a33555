"""Response routing: transport only. Sends the outcome's response and records what happened."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import ClassVar

import attrs

from agentloop import (
    AgentContext,
    FailureEvent,
    FailureKind,
    FailureSource,
    InboxTurn,
    RoutingOutcome,
    StreamedText,
    System,
    TransportError,
    TurnOutcome,
    visible_text,
)
from agentloop._log import get_logger
from agentloop.ports import Channel

UNDELIVERED_TEXT = "the response could not be delivered"

_log = get_logger("agentloop.routing")


class ResponseRoutingSystem(System):
    """Sends `turn_outcome.outgoing_response` through the channel (order 60, always_run).

    It reads nothing but the outcome and what was streamed, attempts delivery at most once
    per turn (I2), sends text, then voice, then each attachment (whitespace-only text is
    nothing to send), and adds `routing_outcome`, nothing else. A message the tool loop
    streamed (`StreamedText`) is closed with the outcome's text, so the user is left with
    the canonical answer; a fallback, or an answer with no text, aborts it first and is
    sent as an ordinary message. A failed send becomes a TRANSPORT
    failure and `error_message`; it never propagates (I7), and the other parts are still
    tried. It never touches history (I4). A turn for an inbox message (`InboxTurn`) first
    claims the message's delivery, and sends nothing when an earlier run of it already had:
    a reply goes out at most once per message id, however often a lost worker's turn is run.
    """

    order: ClassVar[int] = 60
    always_run: ClassVar[bool] = True
    reads = (TurnOutcome,)
    optional_reads = (InboxTurn, StreamedText)
    writes = (TurnOutcome,)

    def __init__(self, channel: Channel) -> None:
        self.channel = channel

    def should_process(self, ctx: AgentContext) -> bool:
        outcome = ctx.turn_outcome
        return (
            outcome is not None
            and not outcome.auto_mode
            and outcome.routing_outcome is None
            and outcome.outgoing_response is not None
        )

    async def process(self, ctx: AgentContext) -> None:
        outcome = ctx.require(TurnOutcome)
        response = outcome.outgoing_response
        if response is None:
            return
        inbox = ctx.get(InboxTurn)
        if inbox is not None and ctx.get(StreamedText) is None and inbox.runs_again(outcome, ctx.failures):
            _log.info("routing.held_for_rerun", turn_id=ctx.turn_id, session_id=ctx.session.id, message_id=inbox.message_id)
            return  # an outage: the worker runs the message again rather than send an apology now
        if inbox is not None and not await inbox.deliveries.claim_delivery(inbox.message_id, inbox.attempt):
            _log.info("routing.already_delivered", turn_id=ctx.turn_id, session_id=ctx.session.id, message_id=inbox.message_id)
            return
        sent_text = sent_voice = False
        sent_attachments = 0
        errors: list[str] = []
        text, voice_text = visible_text(response.text), visible_text(response.voice_text)
        streamed = ctx.get(StreamedText)
        message = streamed.stream if streamed is not None else None
        if message is not None and (outcome.fallback or text is None):
            reason = "the turn ended with a fallback message" if outcome.fallback else "the answer has no text to show"
            await self._send(ctx, errors, message.abort(reason))
            message = None
        if text is not None:
            sending = self.channel.send_text(ctx.session, text, response.hints) if message is None else message.close(text)
            sent_text = await self._send(ctx, errors, sending)
        if voice_text is not None:
            sent_voice = await self._send(ctx, errors, self.channel.send_voice(ctx.session, voice_text))
        for attachment in response.attachments:
            sent_attachments += await self._send(ctx, errors, self.channel.send_attachment(ctx.session, attachment))
        routing = RoutingOutcome(True, sent_text, sent_voice, sent_attachments, errors[0] if errors else None)
        ctx.set(attrs.evolve(outcome, routing_outcome=routing))

    async def _send(self, ctx: AgentContext, errors: list[str], sending: Awaitable[None]) -> bool:
        try:
            await sending
        except TransportError as exc:
            message = str(exc) or UNDELIVERED_TEXT
        except Exception as exc:
            _log.error("routing.send_failed", turn_id=ctx.turn_id, session_id=ctx.session.id, exc_info=exc)
            message = UNDELIVERED_TEXT
        else:
            return True
        errors.append(message)
        ctx.add_failure(FailureEvent(FailureSource.TRANSPORT, self.name, FailureKind.EXCEPTION, message, ctx.clock.now()))
        return False
