"""Running `agentloop serve`: typed options (which `agentloop.cli.serve` reads from the command
line), then uvicorn until SIGTERM or Ctrl-C."""

from __future__ import annotations

import signal
from types import FrameType
from typing import TextIO

import attrs
import uvicorn

from agentloop._log import get_logger
from agentloop.adapters.urls import shown_url
from agentloop.bots import BotError, BotSettings, ModelSettings, start_otel
from agentloop.budgets import Budgets
from agentloop.mid_turn import MidTurnPolicy
from agentloop.retention import load_retention
from agentloop.serve.app import create_app
from agentloop.serve.auth import load_tokens
from agentloop.serve.errors import TokenFileError
from agentloop.serve.settings import PROTOCOL_NAMES, ServeSettings

_log = get_logger("agentloop.serve")


@attrs.frozen
class ServeOptions:
    """What `agentloop serve` is asked to do: which bot, its model and token file, where to listen,
    and the limits `ServeSettings` enforces (their meaning and defaults are ServeSettings')."""

    bot: BotSettings
    model: ModelSettings
    tokens: str
    pipeline: str | None = None
    inbox: bool | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    otel: bool = False
    max_body_bytes: int = 64 * 1024
    max_message_chars: int = 8000
    rate_per_minute: float = 60.0
    rate_burst: int = 10
    turn_timeout: float = 120.0
    idle_timeout: float = 1800.0
    max_concurrent_turns: int | None = None
    mid_turn: str = "queue"
    protocols: frozenset[str] = frozenset(PROTOCOL_NAMES)
    budgets: Budgets = Budgets()
    retention: str | None = None
    """A retention file (`agentloop.retention.load_retention`): the server prunes the stores on its schedule."""


def serve(options: ServeOptions, out: TextIO) -> int:
    """Serve the bot `options` name; one status line when listening."""
    stores = options.bot.stores
    try:
        tokens = load_tokens(options.tokens)  # before the model is reached for: a typo here is the likelier mistake
    except TokenFileError as error:
        raise BotError(str(error)) from error
    try:
        settings = ServeSettings(
            tokens=tokens,
            llm=options.model.llm(),
            stores=stores,
            bot=options.bot.bot,
            pipeline=options.pipeline,
            inbox=options.inbox,
            max_body_bytes=options.max_body_bytes,
            max_message_chars=options.max_message_chars,
            rate_per_minute=options.rate_per_minute,
            rate_burst=options.rate_burst,
            turn_timeout=options.turn_timeout,
            idle_timeout=options.idle_timeout,
            max_concurrent_turns=options.max_concurrent_turns,
            mid_turn=MidTurnPolicy(options.mid_turn),
            protocols=options.protocols,
            budgets=options.budgets,
            retention=None if options.retention is None else load_retention(options.retention),
        )
        app = create_app(settings)
    except ValueError as error:
        raise BotError(str(error)) from error
    shutdown = start_otel("agentloop-serve") if options.otel else None
    mode = "turns through the workers' inbox" if settings.uses_inbox else "turns run here"
    print(
        f"agentloop serve: http://{options.host}:{options.port} bot {options.bot.bot!r}, stores {shown_url(stores)}, {mode}",
        file=out, flush=True,
    )
    # uvicorn stops gracefully on SIGTERM and SIGINT, then raises the signal again for the handler
    # it found; a handler that does nothing lets the command end as a stop should: status 0.
    previous = {number: signal.signal(number, _stopped) for number in (signal.SIGTERM, signal.SIGINT)}
    server = uvicorn.Server(uvicorn.Config(app, host=options.host, port=options.port, log_level="warning"))
    crash: BaseException | None = None
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    except BaseException as error:  # uvicorn's SystemExit when it cannot listen, or whatever ended the event loop
        crash = error
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if shutdown is not None:
            shutdown()
    if not server.started:
        raise BotError(f"the server did not start at {options.host}:{options.port}; the log above says why") from crash
    if crash is not None:
        _log.error("serve.crashed", exc_info=crash)
        first = (str(crash).splitlines() or [""])[0]
        raise BotError(f"the server stopped: {type(crash).__name__}" + (f": {first}" if first else "")) from crash
    print("agentloop serve: stopped", file=out, flush=True)
    return 0


def _stopped(number: int, frame: FrameType | None) -> None:
    """The signal uvicorn raises again once it has stopped: nothing is left to do."""
