"""`agentloop worker`: run the turns of a bot's durable inbox in PostgreSQL, beside other workers."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
from contextlib import AbstractAsyncContextManager
from typing import Any, TextIO

from agentloop.adapters import open_stores
from agentloop.adapters.retention import pruning
from agentloop.adapters.urls import is_postgres_url, shown_url
from agentloop.bots import apply_budgets, built_pipeline, check_models, pipeline_note_taking, release_budgets
from agentloop.cli._options import EXIT_STATUS, Commands, CliError, SharedOptions, add_budgets, add_mid_turn, bot_settings, budgets_of, otel_from_environment
from agentloop.loop import AgentLoop
from agentloop.notes import IdleSessions
from agentloop.retention import load_retention


def register(commands: Commands, options: SharedOptions) -> None:
    """The `worker` command."""
    worker = commands.add_parser(
        "worker", parents=[options.data, options.otel], help="run the turns of a bot's inbox, beside any number of other workers",
        description="Take messages from the bot's durable inbox in PostgreSQL and run their turns through the "
        "pipeline that MODULE:FACTORY builds (its `stores` parameter gets the opened Stores). Turns of one session "
        "run one at a time in submission order across every worker; a worker that dies has its turns run again "
        "by another. The pipeline's HTTP models are checked once before the inbox is opened (a refused key, a wrong "
        "base URL or model name is one line, exit status 1). Prints one status line; SIGTERM or Ctrl-C stops it after "
        "the turns in flight.",
        epilog=EXIT_STATUS,
    )
    worker.add_argument("--pipeline", required=True, metavar="MODULE:FACTORY", help="a factory taking stores (by that name) and returning an AgentLoop, a list of systems or a builder")
    worker.add_argument("--inbox", metavar="URL", help="the PostgreSQL database of the inbox (default: --stores, when that is a postgresql URL)")
    worker.add_argument("--concurrency", type=int, default=4, metavar="N", help="turns of different sessions run at once (default: 4)")
    worker.add_argument("--stall-timeout", type=float, default=30.0, metavar="SECONDS", help="a worker silent this long is taken for dead and its turns run again elsewhere (default: 30)")
    worker.add_argument("--shutdown-grace", type=float, default=30.0, metavar="SECONDS", help="on SIGTERM, how long the turns in flight may take before they are handed back to the inbox (default: 30)")
    worker.add_argument(
        "--idle-end", type=float, metavar="SECONDS",
        help="end (and distil) a session this worker ran turns of once nobody has spoken in it for this long; "
        "needs a pipeline with note-taking (default: sessions are not ended)",
    )
    add_mid_turn(worker)
    add_budgets(worker)
    worker.add_argument(
        "--retention", metavar="FILE",
        help="a TOML retention file: prune the bot's stores at start and on its schedule, one worker at a time "
        "(default: keep everything)",
    )
    worker.set_defaults(handler=_worker)


def workers_package() -> Any:
    """The `agentloop.workers` package, which needs the postgres extra (procrastinate, psycopg)."""
    try:
        return importlib.import_module("agentloop.workers")
    except ImportError as error:
        raise CliError(f"the inbox and workers need PostgreSQL support: pip install 'agentloop-ecs[postgres]' ({error})") from error


def _worker(args: argparse.Namespace, out: TextIO) -> int:
    where = bot_settings(args)
    stores = where.stores
    inbox_url = args.inbox or (stores if is_postgres_url(stores) else None)
    if inbox_url is None:
        raise CliError("the inbox lives in PostgreSQL: give --inbox postgresql://USER@HOST/DB (it defaults to --stores when that is a postgresql URL)")
    workers = workers_package()
    try:
        settings = workers.WorkerSettings(
            concurrency=args.concurrency, stall_timeout=args.stall_timeout, shutdown_grace=args.shutdown_grace
        )
    except ValueError as error:
        raise CliError(f"bad worker setting: {error}") from error
    if args.idle_end is not None and args.idle_end <= 0:
        raise CliError(f"bad worker setting: --idle-end must be a positive number of seconds, not {args.idle_end:g}")
    retention = None if args.retention is None else load_retention(args.retention)
    with (
        otel_from_environment(args.otel, "agentloop-worker"),
        open_stores(stores, bot=where.bot) as opened,
        built_pipeline(args.pipeline, {"stores": lambda: opened}) as loop,
    ):
        check_models(loop)
        apply_budgets(loop, budgets_of(args))
        idle = None if args.idle_end is None else _idle_sessions(args.pipeline, loop, args.idle_end)
        kept = pruning(stores, bot=where.bot, retention=retention)
        try:
            asyncio.run(_work(workers, inbox_url, where.bot, loop, settings, shown_url(stores), out, idle, args.mid_turn, kept))
        finally:
            asyncio.run(release_budgets(loop))  # before the stores close
    return 0


def _idle_sessions(target: str, loop: AgentLoop, idle_after: float) -> IdleSessions:
    """The watch that ends the sessions of the pipeline of `target` once idle (`--idle-end`)."""
    note_taking = pipeline_note_taking(loop)
    if note_taking is None:
        raise CliError(
            f"--idle-end ends sessions through the pipeline's note-taking, and {target} has none; "
            "plug it in with systems.add_note_taking(pipeline, note_taking)"
        )
    return IdleSessions(note_taking, idle_after=idle_after)


async def _work(
    workers: Any, inbox_url: str, bot: str, loop: AgentLoop, settings: Any, stores: str, out: TextIO,
    idle: IdleSessions | None, mid_turn: str, kept: AbstractAsyncContextManager[None],
) -> None:
    """Serve the inbox until SIGTERM or SIGINT, pruning the stores as `kept` does; one status line when ready and one when stopped."""
    async with workers.open_inbox(inbox_url, bot=bot, pool_size=settings.concurrency + 4, mid_turn=mid_turn) as inbox, kept:
        print(
            f"agentloop worker {os.getpid()}: bot {bot!r}, inbox {inbox.url}, stores {stores}, "
            f"{settings.concurrency} turns at once; a lost worker's turns restart within "
            f"{settings.recovery_bound:g}s; SIGTERM stops after the turns in flight",
            file=out, flush=True,
        )
        await workers.run_worker(inbox, loop, settings, idle=idle)
    print(f"agentloop worker {os.getpid()}: stopped", file=out, flush=True)
