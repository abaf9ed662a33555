"""The `agentloop serve` command: settings from the command line, then uvicorn until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
import signal
from types import FrameType
from typing import TextIO

import structlog
import uvicorn

from agentloop.adapters.urls import shown_url
from agentloop.bots import BotError, http_llm, start_otel, stores_url
from agentloop.serve.app import create_app
from agentloop.serve.auth import load_tokens
from agentloop.serve.errors import TokenFileError
from agentloop.serve.settings import ServeSettings

_log = structlog.get_logger("agentloop.serve")


def serve(args: argparse.Namespace, out: TextIO) -> int:
    """Serve the bot the arguments name; one status line when listening."""
    stores = stores_url(args)
    try:
        tokens = load_tokens(args.tokens)  # before the model is reached for: a typo here is the likelier mistake
    except TokenFileError as error:
        raise BotError(str(error)) from error
    try:
        settings = ServeSettings(
            tokens=tokens,
            llm=http_llm(args.base_url, args.model, provider=args.provider),
            stores=stores,
            bot=args.bot,
            pipeline=args.pipeline,
            inbox=args.inbox,
            max_body_bytes=args.max_body_bytes,
            max_message_chars=args.max_message_chars,
            rate_per_minute=args.rate_limit,
            rate_burst=args.burst,
            turn_timeout=args.timeout,
            idle_timeout=args.idle_timeout,
            max_concurrent_turns=args.max_concurrent_turns,
        )
        app = create_app(settings)
    except ValueError as error:
        raise BotError(str(error)) from error
    shutdown = start_otel("agentloop-serve") if args.otel else None
    mode = "turns through the workers' inbox" if settings.uses_inbox else "turns run here"
    print(f"agentloop serve: http://{args.host}:{args.port} bot {args.bot!r}, stores {shown_url(stores)}, {mode}", file=out, flush=True)
    # uvicorn stops gracefully on SIGTERM and SIGINT, then raises the signal again for the handler
    # it found; a handler that does nothing lets the command end as a stop should: status 0.
    previous = {number: signal.signal(number, _stopped) for number in (signal.SIGTERM, signal.SIGINT)}
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning"))
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
        raise BotError(f"the server did not start at {args.host}:{args.port}; the log above says why") from crash
    if crash is not None:
        _log.error("serve.crashed", exc_info=crash)
        first = (str(crash).splitlines() or [""])[0]
        raise BotError(f"the server stopped: {type(crash).__name__}" + (f": {first}" if first else "")) from crash
    print("agentloop serve: stopped", file=out, flush=True)
    return 0


def _stopped(number: int, frame: FrameType | None) -> None:
    """The signal uvicorn raises again once it has stopped: nothing is left to do."""
