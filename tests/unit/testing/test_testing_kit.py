"""The test kit's ScriptedLLM and RecordingChannel, and the ConsoleChannel they stand in for."""

from __future__ import annotations

import ast
import asyncio
import importlib.metadata
import io
import re
import sys
import tomllib
from pathlib import Path

import attrs
import pytest

from agentloop import (
    Attachment,
    FailureKind,
    Finished,
    LlmCallError,
    LlmReply,
    LlmRequest,
    Session,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    TransportError,
    Usage,
)
from agentloop.adapters import ConsoleChannel
from agentloop.testing import RecordedStream, RecordingChannel, ScriptedLLM

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


async def _events(llm: ScriptedLLM) -> list[StreamEvent]:
    return [event async for event in llm.stream(REQUEST)]


def test_scripted_llm_streams_its_reply_in_chunks_and_keeps_its_usage() -> None:
    reply = LlmReply("Hello world", (ToolCall("c1", "add", {"a": 1}),), usage=Usage(7, 3), stop_reason="tool_calls")
    llm = ScriptedLLM([reply, reply], chunk=4)
    assert asyncio.run(_events(llm)) == [
        TextDelta("Hell"), TextDelta("o wo"), TextDelta("rld"),
        ToolCallDelta(0, "c1", "add", '{"a"'), ToolCallDelta(0, None, None, ": 1}"),
        Usage(7, 3), Finished(attrs.evolve(reply, model="scripted")),
    ]
    assert asyncio.run(llm.complete(REQUEST)) == attrs.evolve(reply, model="scripted")


def test_a_paced_scripted_llm_waits_between_streamed_pieces_so_the_answer_grows_visibly() -> None:
    llm = ScriptedLLM(["Hello world"], chunk=4, pace=0.05)

    async def arrival_times() -> list[float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        return [loop.time() - start async for event in llm.stream(REQUEST) if isinstance(event, TextDelta)]

    times = asyncio.run(arrival_times())
    assert times[0] < 0.04
    assert all(later - earlier >= 0.04 for earlier, later in zip(times, times[1:]))
    with pytest.raises(ValueError, match="pace"):
        ScriptedLLM(pace=-1)


@pytest.mark.parametrize("after", [0, 2, 99])
def test_a_cut_step_streams_part_of_its_reply_then_fails_and_never_finishes(after: int) -> None:
    llm = ScriptedLLM([ScriptedLLM.cut("Hello world", after=after)], chunk=4)
    seen: list[StreamEvent] = []

    async def read() -> None:
        async for event in llm.stream(REQUEST):
            seen.append(event)

    with pytest.raises(LlmCallError, match="closed in the middle") as caught:
        asyncio.run(read())
    assert caught.value.retryable
    assert seen == [TextDelta("Hell"), TextDelta("o wo"), TextDelta("rld")][:after]
    with pytest.raises(TimeoutError):
        asyncio.run(ScriptedLLM([ScriptedLLM.cut("x", 0, TimeoutError())]).complete(REQUEST))


def test_recording_channel_records_a_streamed_message_and_its_close_as_the_text_sent() -> None:
    channel = RecordingChannel()

    async def stream() -> None:
        message = await channel.open_stream(SESSION, {"format": "markdown"})
        await message.delta("Hel")
        await message.delta("lo")
        await message.close("Hello.")
        withdrawn = await channel.open_stream(SESSION, {})
        await withdrawn.delta("Par")
        await withdrawn.abort("cut off")

    asyncio.run(stream())
    assert channel.streams == [
        RecordedStream("s", {"format": "markdown"}, ["Hel", "lo"], closed="Hello."),
        RecordedStream("s", {}, ["Par"], aborted="cut off"),
    ]
    assert channel.streams[0].shown == "Hello" and channel.texts == ["Hello."]
    assert channel.sent[0].hints == {"format": "markdown"}


def test_recording_channel_fails_deltas_only_when_asked() -> None:
    channel = RecordingChannel()
    channel.fail_with(kinds=("delta",), times=1)

    async def stream() -> None:
        message = await channel.open_stream(SESSION, {})
        with pytest.raises(TransportError):
            await message.delta("lost")
        await message.delta("shown")
        await message.close("shown")

    asyncio.run(stream())
    assert channel.failed == ["delta"] and channel.streams[0].deltas == ["shown"] and channel.texts == ["shown"]


def test_console_channel_prints_tokens_as_they_come_on_one_line() -> None:
    out = io.StringIO()
    channel = ConsoleChannel(out)

    async def stream(final: str, *, abort: bool = False) -> str:
        message = await channel.open_stream(SESSION, {})
        await message.delta("It is ")
        shown_before_close = out.getvalue()
        await message.delta("sunny.")
        await (message.abort("cut") if abort else message.close(final))
        return shown_before_close

    assert asyncio.run(stream("It is sunny.")) == "bot> It is "
    assert out.getvalue() == "bot> It is sunny.\n"
    asyncio.run(stream("It is sunny in Oslo."))
    asyncio.run(stream("", abort=True))
    assert out.getvalue().splitlines()[1:] == ["bot> It is sunny.", "bot> It is sunny in Oslo.", "bot> It is sunny. [cut off]"]


def test_the_testing_extra_brings_what_the_test_kit_imports_and_no_more() -> None:
    """The tutorial had readers install the project's own `test` extra (torch, PostgreSQL,
    Playwright) to use a kit that needs only pytest, pytest-bdd and hypothesis."""
    root = Path(__file__).resolve().parents[3]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    base = {_distribution(spec) for spec in project["dependencies"]}
    imported = set()
    for module in (root / "agentloop" / "testing").rglob("*.py"):
        if module.name in ("serve.py", "telegram_server.py"):  # documented as needing the serve extra (and telegram)
            continue
        tree = ast.parse(module.read_text())
        top_level = [*tree.body, *(node for block in tree.body if isinstance(block, ast.If) for node in block.body)]
        for node in top_level:  # imports inside a function belong to the extra of what it drives
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
                imported.add(node.module.split(".")[0])
    third_party = {name for name in imported - set(sys.stdlib_module_names) if name != "agentloop"}
    distributions = importlib.metadata.packages_distributions()
    needed = {_distribution(distributions[name][0]) for name in third_party} - base
    assert {_distribution(spec) for spec in extras["testing"]} == needed == {"pytest", "pytest-bdd", "hypothesis"}
    assert "agentloop-ecs[testing]" in extras["test"]
    assert "'agentloop-ecs[testing]'" in (root / "docs" / "tutorial.md").read_text()


def _distribution(spec: str) -> str:
    """The normalised distribution name of a requirement such as `pytest-bdd>=8.0`."""
    return re.split(r"[\[<>=!~ ;]", spec, maxsplit=1)[0].lower().replace("_", "-")
