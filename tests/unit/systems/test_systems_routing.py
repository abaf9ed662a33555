"""ResponseRoutingSystem: transport only, at most once, failures captured (I2, I7), streamed messages finished."""

from __future__ import annotations

import asyncio
from pathlib import Path

import attrs

from delivery_ledger import Ledger
from agentloop import (
    Attachment,
    FailureSource,
    FinishReason,
    InboxTurn,
    IncomingMessage,
    OutgoingResponse,
    RoutingOutcome,
    Session,
    StreamedText,
    TransportError,
    TurnOutcome,
)
from agentloop.testing import RecordingChannel, ScriptedLLM, make_context, run_system_sync
from systems import ResponseRoutingSystem, standard_pipeline

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


def test_a_worker_turn_run_again_for_one_message_sends_its_reply_once() -> None:
    """I13: a reply goes out at most once per message id, however often its turn runs."""
    channel, ledger = RecordingChannel(), Ledger()
    first = make_context(components=[FULL, InboxTurn("message-7", 1, ledger)])
    run_system_sync(ResponseRoutingSystem(channel), first)
    again = make_context(components=[FULL, InboxTurn("message-7", 2, ledger)])
    run_system_sync(ResponseRoutingSystem(channel), again)
    other = make_context(components=[FULL, InboxTurn("message-8", 1, ledger)])
    run_system_sync(ResponseRoutingSystem(channel), other)
    assert channel.texts == ["hi", "hi"]  # message-7 once, message-8 once
    assert again.require(TurnOutcome).routing_outcome is None and again.failures == ()


def _streamed(channel: RecordingChannel, shown: str, *, complete: bool = True) -> StreamedText:
    async def open_and_show() -> StreamedText:
        message = await channel.open_stream(Session("test-session"), {})
        await message.delta(shown)
        return StreamedText("m1", shown, complete, message)

    return asyncio.run(open_and_show())


def test_a_streamed_answer_is_closed_with_the_canonical_text_instead_of_sent_again() -> None:
    channel = RecordingChannel()
    answer = TurnOutcome(FinishReason.SUCCESS, "It is sunny.", OutgoingResponse("It is sunny.", "Sunny.", FILES[:1]))
    ctx = make_context(components=[answer, _streamed(channel, "It is sunny.  ")])
    run_system_sync(ResponseRoutingSystem(channel), ctx)
    (stream,) = channel.streams
    assert (stream.closed, stream.aborted) == ("It is sunny.", None)
    assert [(s.kind, s.text) for s in channel.sent[:2]] == [("text", "It is sunny."), ("voice", "Sunny.")]
    assert ctx.require(TurnOutcome).routing_outcome == RoutingOutcome(True, True, True, 1, None)


def test_a_fallback_or_a_voice_only_answer_withdraws_the_streamed_message_first() -> None:
    for outcome, sent in (
        (TurnOutcome(FinishReason.ERROR, None, OutgoingResponse.text_only("Sorry."), fallback=True), [("text", "Sorry.")]),
        (TurnOutcome(FinishReason.SUCCESS, "Sunny.", OutgoingResponse.voice_only("Sunny.")), [("voice", "Sunny.")]),
    ):
        channel = RecordingChannel()
        ctx = make_context(components=[outcome, _streamed(channel, "Sun", complete=False)])
        run_system_sync(ResponseRoutingSystem(channel), ctx)
        (stream,) = channel.streams
        assert stream.closed is None and stream.aborted
        assert [(s.kind, s.text) for s in channel.sent] == sent


def test_a_stream_that_cannot_be_closed_is_a_transport_failure() -> None:
    channel = RecordingChannel()
    streamed = _streamed(channel, "hi")
    channel.fail_with(kinds=("text",))
    ctx = make_context(components=[TurnOutcome(FinishReason.SUCCESS, "hi", OutgoingResponse.text_only("hi")), streamed])
    run_system_sync(ResponseRoutingSystem(channel), ctx)
    routing = ctx.require(TurnOutcome).routing_outcome
    assert routing == RoutingOutcome(True, False, False, 0, "the chat service is unreachable")
    assert [f.source for f in ctx.failures] == [FailureSource.TRANSPORT] and channel.streams[0].closed is None


def test_a_worker_turn_streams_only_after_claiming_its_messages_delivery(tmp_path: Path) -> None:
    """I13 with streaming: the run that claims the reply streams and closes it; a re-run of that
    message shows nothing, not even a first piece, and sends nothing."""
    ledger, channel = Ledger(), RecordingChannel()
    pipeline = standard_pipeline(ScriptedLLM(["Hello there, friend."] * 2, chunk=4), channel, data_dir=tmp_path)
    loop = pipeline.build(inputs=[InboxTurn])
    for attempt in (1, 2):
        loop.run_turn_sync(Session("s1"), IncomingMessage("hi"), components=[InboxTurn("message-7", attempt, ledger)])
    (stream,) = channel.streams
    assert stream.closed == "Hello there, friend." and len(stream.deltas) > 1
    assert channel.texts == ["Hello there, friend."]
    pipeline.close()
