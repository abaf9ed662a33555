"""ResponseRoutingSystem: transport only, at most once, failures captured (I2, I7)."""

from __future__ import annotations

import attrs

from agentloop import (
    Attachment,
    FailureSource,
    FinishReason,
    InboxTurn,
    OutgoingResponse,
    RoutingOutcome,
    TransportError,
    TurnOutcome,
)
from agentloop.testing import RecordingChannel, make_context, run_system_sync
from systems import ResponseRoutingSystem

FILES = (Attachment("a.txt", "text/plain", b"a"), Attachment("b.txt", "text/plain", b"b"))
FULL = TurnOutcome(FinishReason.SUCCESS, "hi", OutgoingResponse("hi", "hey", FILES, {"format": "markdown"}))


def test_sends_every_part_and_records_it() -> None:
    channel = RecordingChannel()
    ctx = make_context(components=[FULL])
    run_system_sync(ResponseRoutingSystem(channel), ctx)
    assert [(s.kind, s.text) for s in channel.sent[:2]] == [("text", "hi"), ("voice", "hey")]
    assert channel.sent[0].hints == {"format": "markdown"} and channel.attachments == list(FILES)
    assert ctx.require(TurnOutcome).routing_outcome == RoutingOutcome(True, True, True, 2, None)


def test_a_failing_part_does_not_stop_the_others() -> None:
    channel = RecordingChannel()
    channel.fail_with(TransportError("voice is not supported here"), kinds=("voice",))
    ctx = make_context(components=[FULL])
    run_system_sync(ResponseRoutingSystem(channel), ctx)
    routing = ctx.require(TurnOutcome).routing_outcome
    assert routing == RoutingOutcome(True, True, False, 2, "voice is not supported here")
    assert [f.source for f in ctx.failures] == [FailureSource.TRANSPORT]
    assert ctx.require(TurnOutcome) == attrs.evolve(FULL, routing_outcome=routing)  # it adds only what is its own


def test_unexpected_channel_errors_get_a_user_safe_message() -> None:
    channel = RecordingChannel()
    channel.fail_with(KeyError("internal token abc"))
    ctx = make_context(components=[FULL])
    run_system_sync(ResponseRoutingSystem(channel), ctx)
    routing = ctx.require(TurnOutcome).routing_outcome
    assert routing is not None and not routing.delivered
    assert routing.error_message == "the response could not be delivered"


def test_routes_once_and_never_in_auto_mode() -> None:
    channel = RecordingChannel()
    routed = TurnOutcome(FinishReason.SUCCESS, "hi", OutgoingResponse.text_only("hi"), routing_outcome=RoutingOutcome(True, True))
    ctx = make_context(components=[routed])
    assert not run_system_sync(ResponseRoutingSystem(channel), ctx)
    auto = make_context(auto_mode=True, components=[TurnOutcome(FinishReason.SUCCESS, "x", auto_mode=True)])
    assert not run_system_sync(ResponseRoutingSystem(channel), auto)
    assert channel.sent == []


def test_whitespace_only_text_or_voice_is_never_sent() -> None:
    channel = RecordingChannel()
    blank = TurnOutcome(FinishReason.SUCCESS, "hi", OutgoingResponse(" \n ", "\t", FILES[:1]))
    ctx = make_context(components=[blank])
    run_system_sync(ResponseRoutingSystem(channel), ctx)
    assert [s.kind for s in channel.sent] == ["attachment"]
    assert ctx.require(TurnOutcome).routing_outcome == RoutingOutcome(True, False, False, 1, None)


class _Ledger:
    """A delivery ledger: the first claim of a message id wins."""

    def __init__(self) -> None:
        self.claimed: set[str] = set()

    async def claim_delivery(self, message_id: str) -> bool:
        first = message_id not in self.claimed
        self.claimed.add(message_id)
        return first


def test_a_worker_turn_run_again_for_one_message_sends_its_reply_once() -> None:
    """I13: a reply goes out at most once per message id, however often its turn runs."""
    channel, ledger = RecordingChannel(), _Ledger()
    first = make_context(components=[FULL, InboxTurn("message-7", 1, ledger)])
    run_system_sync(ResponseRoutingSystem(channel), first)
    again = make_context(components=[FULL, InboxTurn("message-7", 2, ledger)])
    run_system_sync(ResponseRoutingSystem(channel), again)
    other = make_context(components=[FULL, InboxTurn("message-8", 1, ledger)])
    run_system_sync(ResponseRoutingSystem(channel), other)
    assert channel.texts == ["hi", "hi"]  # message-7 once, message-8 once
    assert again.require(TurnOutcome).routing_outcome is None and again.failures == ()
