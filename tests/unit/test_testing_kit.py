"""The test kit's ScriptedLLM and RecordingChannel, and the ConsoleChannel they stand in for."""

from __future__ import annotations

import asyncio
import io

import pytest

from agentloop import Attachment, FailureKind, LlmCallError, LlmReply, LlmRequest, Session, TransportError
from agentloop.adapters import ConsoleChannel
from agentloop.testing import RecordingChannel, ScriptedLLM

REQUEST = LlmRequest(())
SESSION = Session("s")


def test_scripted_llm_replays_its_script_and_keeps_requests() -> None:
    llm = ScriptedLLM(["one", LlmReply("two", model="other"), LlmCallError("rate", kind=FailureKind.RATE_LIMIT)])
    assert asyncio.run(llm.complete(REQUEST)) == LlmReply("one", model="scripted")
    assert asyncio.run(llm.complete(REQUEST)).model == "other"
    with pytest.raises(LlmCallError) as caught:
        asyncio.run(llm.complete(REQUEST))
    assert caught.value.kind is FailureKind.RATE_LIMIT
    with pytest.raises(LlmCallError, match="ran out of replies after 3"):
        asyncio.run(llm.complete(REQUEST))
    assert len(llm.requests) == 4 and llm.remaining == 0
    assert asyncio.run(llm.add("more").complete(REQUEST)).content == "more"


def test_scripted_llm_from_a_function() -> None:
    async def echo(request: LlmRequest) -> str:
        return f"{len(request.messages)} messages"

    llm = ScriptedLLM(echo)
    assert asyncio.run(llm.complete(REQUEST)).content == "0 messages"
    with pytest.raises(TypeError):
        llm.add("x")
    first, second = ScriptedLLM.tool_call("a"), ScriptedLLM.tool_call("a")
    assert first.tool_calls[0].id != second.tool_calls[0].id


def test_recording_channel_records_and_fails_on_request() -> None:
    channel = RecordingChannel()
    asyncio.run(channel.send_text(SESSION, "hi", {}))
    channel.fail_with(kinds=("voice",), times=1)
    with pytest.raises(TransportError):
        asyncio.run(channel.send_voice(SESSION, "hey"))
    asyncio.run(channel.send_voice(SESSION, "hey again"))
    asyncio.run(channel.send_attachment(SESSION, Attachment("f")))
    assert channel.texts == ["hi"] and channel.voices == ["hey again"] and channel.failed == ["voice"]
    assert [a.name for a in channel.attachments] == ["f"]


def test_console_channel_writes_labelled_lines() -> None:
    out = io.StringIO()
    channel = ConsoleChannel(out)
    asyncio.run(channel.send_text(SESSION, "hello", {}))
    asyncio.run(channel.send_voice(SESSION, "hi"))
    asyncio.run(channel.send_attachment(SESSION, Attachment("a.png", "image/png", b"123")))
    assert out.getvalue().splitlines() == ["bot> hello", "bot> [voice] hi", "bot> [file] a.png (image/png, 3 bytes)"]
    out.close()
    with pytest.raises(TransportError, match="terminal is closed"):
        asyncio.run(channel.send_text(SESSION, "x", {}))
