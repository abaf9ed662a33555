"""The Telegram tests' bot: a scripted model whose answers depend on what the user typed, its tools,
the chat file, and `running_bot`, which answers a `FakeBotApi`'s chats by long polling in this event loop."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import attrs

from agentloop import Attachment, tool
from agentloop.adapters import open_note_taking, open_stores
from agentloop.adapters.channels.telegram import (
    TelegramBot, TelegramChannel, Webhook, direct_turns, load_chats, run_until, telegram_application,
)
from agentloop.messages import Role
from agentloop.ports import Channel, Stores, Synthesizer, Transcriber
from agentloop.messages import LlmReply, LlmRequest
from agentloop.testing import ScriptedLLM
from agentloop.testing.telegram_server import FakeBotApi
from serve_kit import AGENTLOOP
from systems import StandardPipeline, add_note_taking, standard_pipeline

ALICE_CHAT = 1001
STRANGER_CHAT = 666
CHATS = """
[[chats]]
chat = 1001
user = "alice"
org = "acme"
project = "helpdesk"
"""
LONG_ANSWER = "\n\n".join(f"Paragraph {n}: " + " ".join(["word"] * 300) for n in range(5))
"""Five paragraphs of about 1500 characters: two fit in a Telegram message, three do not."""
deleted: list[str] = []


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file for good."""
    deleted.append(path)
    return f"deleted {path}"


@tool
def make_report() -> Attachment:
    """Write the report as a file."""
    return Attachment("report.csv", "text/csv", b"day,sales\nmon,3\n")


@tool
def draw_chart() -> Attachment:
    """Draw the sales chart."""
    return Attachment("chart.png", "image/png", PNG)


PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360000002000105fe02fea7d5ee0000000049454e44ae426082")
"""A one-pixel PNG image."""


def answer(request: LlmRequest) -> LlmReply | str:
    """Echoes the user; `speak X`, `delete X` and `report` call tools, `long` answers at length."""
    last = request.messages[-1]
    text = last.content or ""
    if last.role is Role.TOOL:
        return f"done: {text}"
    for verb, name, key in (("speak ", "send_voice", "text"), ("delete ", "delete_file", "path")):
        if text.startswith(verb):
            return ScriptedLLM.tool_call(name, {key: text.removeprefix(verb)})
    if text in ("report", "chart"):
        return ScriptedLLM.tool_call("make_report" if text == "report" else "draw_chart", {})
    return LONG_ANSWER if text == "long" else f"echo: {text}"


def telegram_pipeline(channel: Channel, stores: Stores) -> StandardPipeline:
    """The standard bot on the scripted model, with a tool needing approval and one returning a file."""
    return standard_pipeline(ScriptedLLM(answer), channel, stores=stores, tools=[delete_file, make_report, draw_chart])


@asynccontextmanager
async def running_bot(
    api: FakeBotApi, data: Path, *, llm: Any = None, synthesizer: Synthesizer | None = None,
    transcriber: Transcriber | None = None, edit_interval: float = 0.0, webhook: Webhook | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> AsyncIterator[TelegramBot]:
    """The test bot answering `api`'s chats (the chat file `CHATS`) until the block ends, its stores in `data`."""
    (data.parent / "chats.toml").write_text(CHATS)
    application = telegram_application(api.token, base_url=api.base_url, base_file_url=api.base_file_url)
    channel = TelegramChannel(application.bot, synthesizer=synthesizer, edit_interval=edit_interval, clock=clock)
    model = llm if llm is not None else ScriptedLLM(answer)
    async with AsyncExitStack() as stack:
        stores = stack.enter_context(open_stores(str(data), bot="bot"))
        pipeline = stack.enter_context(standard_pipeline(model, channel, stores=stores, tools=[delete_file, make_report, draw_chart]))
        note_taking = stack.enter_context(open_note_taking(stores, model))
        add_note_taking(pipeline, note_taking)
        bot = TelegramBot(application, channel, load_chats(data.parent / "chats.toml"), direct_turns(pipeline.build()),
                          note_taking=note_taking, approvals=stores.approvals, transcriber=transcriber)
        stop = asyncio.Event()
        task = asyncio.create_task(run_until(bot, stop, webhook=webhook, poll_timeout=1))
        try:
            yield bot
        finally:
            stop.set()
            await task


class KnownWords:
    """A `Transcriber` that hears `words` in any voice message, and keeps the audio it was given."""

    def __init__(self, words: str) -> None:
        self.words = words
        self.heard: list[bytes] = []

    async def transcribe(self, audio: bytes, media_type: str) -> str:
        self.heard.append(audio)
        return self.words


@attrs.define
class CommandRun:
    """`agentloop telegram` run by `telegram_command`: its first line while it runs, its exit status and output once stopped."""

    first_line: str
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""


@contextmanager
def telegram_command(api: FakeBotApi, cwd: Path, *options: str, env: dict[str, str] | None = None) -> Iterator[CommandRun]:
    """`agentloop telegram OPTIONS` in `cwd` on `api`'s Bot API with the pipeline `telegram_pipeline` and the chat
    file `CHATS` (data in data/ unless OPTIONS name --stores); stopped with SIGTERM after the block."""
    (cwd / "chats.toml").write_text(CHATS)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "TELEGRAM_BOT_TOKEN": api.token, **(env or {}),
           "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests"), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [*AGENTLOOP, "telegram", "--pipeline", "telegram_kit:telegram_pipeline", "--chats", "chats.toml",
         "--api-url", api.base_url, "--file-url", api.base_file_url, *options,
         *(() if "--stores" in options else ("--data-dir", "data"))],
        cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert process.stdout is not None
    run = CommandRun(process.stdout.readline())
    try:
        yield run
    finally:
        process.send_signal(signal.SIGTERM)
        run.stdout, run.stderr = process.communicate(timeout=60)
        run.returncode = process.returncode
