"""A bot's inbox with one in-process worker answering it, for the worker and server tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agentloop import Tool
from agentloop.adapters import open_stores
from agentloop.testing import RecordingChannel, ScriptedLLM
from agentloop.workers import Inbox, WorkerSettings, open_inbox, run_worker
from systems import standard_pipeline


async def with_worker(
    url: str, body: Callable[[Inbox, RecordingChannel], Awaitable[Any]], *, poll_interval: float = 0.2,
    llm: ScriptedLLM | None = None, tools: Sequence[Tool] = (),
) -> Any:
    """Run `body` against a bot's inbox while one in-process worker answers it (with `llm`, by
    default one that echoes the message, and `tools`); the bot's stores are in the inbox's database."""
    channel = RecordingChannel()
    llm = llm or ScriptedLLM(lambda request: f"echo: {request.messages[-1].content}")
    with open_stores(url, bot="helper") as stores, standard_pipeline(llm, channel, stores=stores, tools=tools) as pipeline:
        loop = pipeline.build()
        async with open_inbox(url, bot="helper") as inbox:
            worker = asyncio.create_task(
                run_worker(inbox, loop, WorkerSettings(concurrency=2, poll_interval=poll_interval), install_signal_handlers=False)
            )
            try:
                return await body(inbox, channel)
            finally:
                worker.cancel()
                await asyncio.gather(worker, return_exceptions=True)
