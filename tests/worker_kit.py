"""A bot's inbox with one in-process worker answering it, for the worker and server tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

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


class CuttableDatabase:
    """A relay on a Unix socket in front of a test's PostgreSQL, so a test can take the database
    away from the clients connected through `url` while the shared server keeps running.

    `cut()` closes every relayed connection, as a stopped server does; new connections are then
    refused, or with `silent` accepted and never answered. `restore()` relays them again.
    """

    def __init__(self, url: str, directory: Path) -> None:
        self._socket_dir = parse_qs(urlsplit(url).query)["host"][0]
        self._path = directory / ".s.PGSQL.5432"
        self.url = url.replace(f"host={self._socket_dir}", f"host={directory}")
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.silent = False

    async def restore(self) -> None:
        self.silent = False
        if self._server is None:
            self._server = await asyncio.start_unix_server(self._relay, path=str(self._path))

    async def cut(self, *, silent: bool = False) -> None:
        self.silent = silent
        if not silent and self._server is not None:
            self._server.close()
            self._server = None
            self._path.unlink(missing_ok=True)
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.silent:
            self._writers.add(writer)
            return
        up_reader, up_writer = await asyncio.open_unix_connection(f"{self._socket_dir}/.s.PGSQL.5432")
        self._writers.update((writer, up_writer))
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True)
        self._writers.difference_update((writer, up_writer))

    async def close(self) -> None:
        await self.cut()


async def _pipe(source: asyncio.StreamReader, target: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            target.write(data)
            await target.drain()
    finally:
        target.transport.abort()


@asynccontextmanager
async def cuttable(url: str, directory: Path) -> AsyncIterator[CuttableDatabase]:
    """A `CuttableDatabase` in front of `url`, relaying from the start of the block to its end."""
    database = CuttableDatabase(url, directory)
    await database.restore()
    try:
        yield database
    finally:
        await database.close()
