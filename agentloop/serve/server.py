"""The served app's state (`Server`, its `Bot` and the per-session `Gate`), and opening and closing the bot."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager
from typing import Any

import attrs

from agentloop._log import get_logger
from agentloop.adapters import Stores, open_note_taking, open_stores
from agentloop.adapters.stores import open_replies
from agentloop.bots import apply_budgets, built_pipeline, open_bot, pipeline_note_taking, release_budgets
from agentloop.context import Session
from agentloop.loop import AgentLoop
from agentloop.notes import IdleSessions, NoteTaking
from agentloop.ports.replies import Replies
from agentloop.privacy import Subject
from agentloop.scopes import history_scope
from agentloop.serve.auth import Tokens
from agentloop.serve.channel import HttpChannel
from agentloop.serve.errors import ApiError
from agentloop.serve.limits import RateLimiter
from agentloop.serve.settings import ServeSettings

_log = get_logger("agentloop.serve")


@attrs.define
class Bot:
    """What serves the requests: the loop (None when workers run the turns), the inbox, the stores,
    note-taking and the watch that ends idle sessions."""

    stores: Stores
    note_taking: NoteTaking
    loop: AgentLoop | None = None
    inbox: Any = None
    idle: IdleSessions | None = None
    replies: Replies | None = None


@attrs.define
class Gate:
    """One session's turn at a time in this server: the session, the lock, and how many requests hold or await it."""

    session: Session
    lock: asyncio.Lock = attrs.Factory(asyncio.Lock)
    users: int = 0


@attrs.define
class Server:
    """The app's state: settings, callers, limits, the channel and (while running) the bot."""

    settings: ServeSettings
    tokens: Tokens
    limiter: RateLimiter
    channel: HttpChannel = attrs.Factory(HttpChannel)
    bot: Bot | None = None
    gates: dict[str, Gate] = attrs.Factory(dict)
    turns: set[asyncio.Task[Any]] = attrs.Factory(set)
    erasing: list[Subject] = attrs.Factory(list)
    """The subjects an admin is erasing now: their sessions start no turn until it is done."""

    @property
    def running(self) -> Bot:
        if self.bot is None:
            raise ApiError(503, "starting", "the server is starting or stopping; try again in a moment")
        return self.bot

    def refuse_if_erasing(self, session: Session) -> None:
        """503 (`Retry-After`) when an erase running now covers `session`: nothing of it starts until the erase is done."""
        if any(subject.matches(history_scope(session)) for subject in self.erasing):
            raise ApiError(
                503, "erasing", "this user's data is being erased just now; send the same request again in a moment",
                headers={"Retry-After": "1"},
            )

    @asynccontextmanager
    async def holding(self, session: Session) -> AsyncIterator[None]:
        """`session`'s lock held, as a turn holds it, so an erase waits for what runs under it; 503 if one began meanwhile."""
        gate = self.gates.setdefault(session.id, Gate(session))
        gate.users += 1
        try:
            async with gate.lock:
                self.refuse_if_erasing(session)
                yield
        finally:
            gate.users -= 1
            if not gate.users:
                del self.gates[session.id]


@asynccontextmanager
async def serving(server: Server) -> AsyncIterator[Bot]:
    """The server's bot, open (and set as `server.bot`) for as long as the app runs; the turns left are settled before it closes."""
    async with _open(server) as bot:
        server.bot = bot
        try:
            yield bot
        finally:
            server.bot = None
            await settle(server.turns)


@asynccontextmanager
async def _open(server: Server) -> AsyncIterator[Bot]:
    """Open the bot the settings name: its stores and note-taking, and either its loop or the workers' inbox."""
    settings = server.settings
    async with AsyncExitStack() as closing:
        stack = closing.enter_context(ExitStack())
        if settings.uses_inbox:
            stores = stack.enter_context(open_stores(settings.stores, bot=settings.bot))
            bot = Bot(stores, stack.enter_context(open_note_taking(stores, settings.llm)))
            from agentloop.workers import open_inbox  # the postgres extra

            bot.inbox = await closing.enter_async_context(open_inbox(settings.stores, bot=settings.bot, mid_turn=settings.mid_turn))
        elif settings.pipeline is None:
            standard = stack.enter_context(open_bot(settings.stores, settings.llm, server.channel, bot=settings.bot))
            assert standard.pipeline.stores is not None  # open_bot gives the pipeline its stores
            bot = Bot(standard.pipeline.stores, standard.note_taking, standard.loop)
        else:
            stores = stack.enter_context(open_stores(settings.stores, bot=settings.bot))
            offered: dict[str, Callable[[], Any]] = {
                "llm": lambda: settings.llm, "channel": lambda: server.channel, "stores": lambda: stores,
            }
            loop = stack.enter_context(built_pipeline(settings.pipeline, offered))
            # the pipeline's own note-taking holds what it captured: ending a session drains it first
            note_taking = pipeline_note_taking(loop) or stack.enter_context(open_note_taking(stores, settings.llm))
            bot = Bot(stores, note_taking, loop)
        if bot.loop is not None and settings.turn_timeout is not None:
            bot.loop.turn_timeout = settings.turn_timeout
        if bot.loop is not None and settings.max_concurrent_turns is not None:
            bot.loop.max_concurrent_turns = settings.max_concurrent_turns
        if bot.loop is not None:
            bot.loop.mid_turn = settings.mid_turn
            apply_budgets(bot.loop, settings.budgets)
            closing.push_async_callback(release_budgets, bot.loop)  # before the stores close
            bot.replies = await closing.enter_async_context(open_replies(bot.stores.url, bot=settings.bot))
        bot.idle = await closing.enter_async_context(IdleSessions(bot.note_taking, idle_after=settings.idle_timeout))
        _log.info("serve.started", bot=settings.bot, inbox=bot.inbox is not None)
        yield bot


async def settle(tasks: set[asyncio.Task[Any]]) -> None:
    """Let the turns still running (their clients gone) finish before the stores close."""
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
