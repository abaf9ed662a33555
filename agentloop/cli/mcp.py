"""`agentloop mcp`: the bot as an MCP server over standard input and output, for an MCP client that starts it
(imported only when run, so the base install needs neither the `mcp` SDK nor starlette)."""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
from typing import TextIO

from agentloop.cli._options import EXIT_STATUS, MODEL_EPILOG, Commands, CliError, SharedOptions, bot_settings, model_settings, seconds


def register(commands: Commands, options: SharedOptions) -> None:
    """The `mcp` command."""
    mcp = commands.add_parser(
        "mcp", parents=[options.data, options.model], help="serve a bot to an MCP client over stdio: the tools ask and decide",
        description="An MCP server on standard input and output, for a client that starts it as a command: the tool ask "
        "sends a message (and an optional session_id) and returns the reply, decide answers a tool call awaiting approval. "
        "Every call is made as the one local caller the flags name (stdio carries no token); session ids are signed "
        "with $AGENTLOOP_SERVE_SECRET, so they last across runs when it is set (and are then valid over HTTP for the "
        "same user and chain), and only for this run otherwise. Logs go to stderr.",
        epilog=f"{MODEL_EPILOG} {EXIT_STATUS}",
    )
    mcp.add_argument(
        "--pipeline", metavar="MODULE:FACTORY",
        help="your pipeline instead of the standard one: a factory taking llm, channel and stores by name (or nothing)",
    )
    mcp.add_argument("--user", default="local", help="the user every call is made as (default: local)")
    for layer in ("org", "team", "project"):
        mcp.add_argument(f"--{layer}", help=f"the caller's {layer} id (default: none)")
    mcp.add_argument("--timeout", type=seconds, default=120.0, metavar="SECONDS", help="the turn deadline (default: 120)")
    mcp.set_defaults(handler=_mcp)


def _mcp(args: argparse.Namespace, out: TextIO) -> int:
    try:
        from agentloop.serve import Caller, ServeSettings
        from agentloop.serve.auth import SECRET_VARIABLE, Tokens
        from agentloop.serve.protocols.mcp import serve_stdio
        from agentloop.serve.limits import RateLimiter
        from agentloop.serve.server import Server
    except ImportError as error:
        raise CliError(f"serving over MCP needs the mcp SDK and starlette: pip install 'agentloop-ecs[serve]' ({error})") from error
    secret = os.environ.get(SECRET_VARIABLE)
    if secret is not None and len(secret) < 16:
        raise CliError(f"${SECRET_VARIABLE} must be at least 16 characters long (e.g. from `openssl rand -hex 32`)")
    where = bot_settings(args)
    tokens = Tokens({}, secret.encode() if secret else secrets.token_bytes(32))
    settings = ServeSettings(
        tokens=tokens, llm=model_settings(args).llm(), stores=where.stores, bot=where.bot, pipeline=args.pipeline,
        inbox=False, turn_timeout=args.timeout,
    )
    server = Server(settings, tokens, RateLimiter(settings.rate_per_minute, settings.rate_burst))
    asyncio.run(serve_stdio(server, Caller(args.user, args.org, args.team, args.project)))
    return 0
