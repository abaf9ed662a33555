"""`agentloop serve`: its options, and the `ServeOptions` they make for `agentloop.serve.command`
(imported only when serving, so the base install needs neither starlette nor uvicorn)."""

from __future__ import annotations

import argparse
from typing import TextIO

from agentloop.cli._options import EXIT_STATUS, MODEL_EPILOG, Commands, CliError, SharedOptions, add_budgets, add_mid_turn, bot_settings, budgets_of, model_settings, seconds


PROTOCOLS = {"openai": "the OpenAI API", "a2a": "A2A", "agui": "AG-UI", "mcp": "MCP"}
"""The standard protocols served beside the native API, each switched off by `--no-NAME`."""


def register(commands: Commands, options: SharedOptions) -> None:
    """The `serve` command; `_serve` reads every option it declares."""
    serve = commands.add_parser(
        "serve", parents=[options.data, options.model], help="serve a bot over HTTP: a JSON and streaming API and a chat page",
        description="Serve the bot at http://HOST:PORT: the API under /v1 (its OpenAPI document at /openapi.json), "
        "the chat page at /. Every /v1 request carries a bearer token from --tokens, which says its user and tenant. "
        "SIGTERM or Ctrl-C stops it.",
        epilog=f"{MODEL_EPILOG} {EXIT_STATUS}",
    )
    serve.add_argument("--tokens", required=True, metavar="FILE", help="the TOML token file: each token's user, org, team and project")
    serve.add_argument(
        "--pipeline", metavar="MODULE:FACTORY",
        help="your pipeline instead of the standard one: a factory taking llm, channel and stores by name (or nothing)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="the port to listen on (default: 8000)")
    serve.add_argument(
        "--inbox", action=argparse.BooleanOptionalAction, default=None,
        help="submit turns to the workers' inbox (run `agentloop worker` beside it) instead of running them here "
        "(default: on for postgresql stores, off otherwise)",
    )
    serve.add_argument("--timeout", type=seconds, default=120.0, metavar="SECONDS", help="the turn deadline (default: 120)")
    serve.add_argument("--max-body-bytes", type=int, default=65536, metavar="N", help="larger request bodies get 413 (default: 65536)")
    serve.add_argument("--max-message-chars", type=int, default=8000, metavar="N", help="longer messages get 422 (default: 8000)")
    serve.add_argument("--rate-limit", type=float, default=60.0, metavar="PER_MINUTE", help="requests a token may make a minute on average (default: 60)")
    serve.add_argument("--burst", type=int, default=10, metavar="N", help="requests a token may make at once (default: 10)")
    serve.add_argument(
        "--idle-timeout", type=seconds, default=1800.0, metavar="SECONDS",
        help="a session without a turn this long is ended and distilled (default: 1800)",
    )
    serve.add_argument(
        "--max-concurrent-turns", type=int, default=None, metavar="N",
        help="run at most N turns here at once, the others waiting their turn (default: no bound)",
    )
    add_mid_turn(serve)
    for name, protocol in PROTOCOLS.items():
        serve.add_argument(f"--no-{name}", dest=f"no_{name}", action="store_true", help=f"do not serve {protocol} (served by default)")
    add_budgets(serve)
    serve.add_argument(
        "--retention", metavar="FILE",
        help="a TOML retention file: prune the bot's stores at start and on its schedule (default: keep everything)",
    )
    serve.add_argument("--otel", action="store_true", help="export traces and metrics with OpenTelemetry, configured by the OTEL_* variables")
    serve.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace, out: TextIO) -> int:
    try:
        from agentloop.serve.command import ServeOptions, serve
    except ImportError as error:
        raise CliError(f"serving needs starlette and uvicorn: pip install 'agentloop-ecs[serve]' ({error})") from error
    options = ServeOptions(
        bot=bot_settings(args),
        model=model_settings(args),
        tokens=args.tokens,
        pipeline=args.pipeline,
        inbox=args.inbox,
        host=args.host,
        port=args.port,
        otel=args.otel,
        max_body_bytes=args.max_body_bytes,
        max_message_chars=args.max_message_chars,
        rate_per_minute=args.rate_limit,
        rate_burst=args.burst,
        turn_timeout=args.timeout,
        idle_timeout=args.idle_timeout,
        max_concurrent_turns=args.max_concurrent_turns,
        mid_turn=args.mid_turn,
        protocols=frozenset(name for name in PROTOCOLS if not getattr(args, f"no_{name}")),
        budgets=budgets_of(args),
        retention=args.retention,
    )
    return serve(options, out)
