"""`agentloop demo`: a complete bot on a scripted model, every step checked."""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import TextIO

from agentloop.adapters import stores_exist
from agentloop.adapters.urls import shown_url
from agentloop.bots import open_bot
from agentloop.cli._options import Commands, CliError, SharedOptions
from agentloop.demo import run_demo


def register(commands: Commands, options: SharedOptions) -> None:
    """The `demo` command; its failures are staged, so it logs only errors."""
    demo = commands.add_parser(
        "demo", help="run a complete bot offline and check every step",
        description="A travel helper on a scripted model (no network, no API key) runs three sessions: "
        "tools, a rate-limited turn answered with a fallback, recovery, a note distilled at the end of "
        "a session and offered to a later one. Progress goes to stderr, the story to stdout.",
        epilog="exit status: 0 every step behaved as expected; 1 a step misbehaved (the line says which); 2 a usage error.",
    )
    demo_place = demo.add_mutually_exclusive_group()
    demo_place.add_argument(
        "--data-dir", metavar="DIR",
        help="a new or empty directory to keep the bot's files in (default: a temporary directory, removed)",
    )
    demo_place.add_argument(
        "--stores", metavar="URL",
        help="where to keep the bot's stores instead: sqlite:///DIR or postgresql://..., where no bot named 'bot' has stores yet",
    )
    demo.set_defaults(handler=_demo, quiet_log_level="ERROR")


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    with ExitStack() as stack:
        stores: str | Path
        if args.stores is not None:
            stores = args.stores
            if stores_exist(stores):
                raise CliError(
                    f"the bot 'bot' already has stores at {shown_url(args.stores)}; the demo's story starts from a new bot, "
                    "so give --stores a place with no bot named 'bot' (a new database or directory)"
                )
        elif args.data_dir is None:
            stores = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="agentloop-demo-")))
        else:
            stores = Path(args.data_dir)
            if stores.exists() and not stores.is_dir():
                raise CliError(f"{stores} is a file, not a directory; give a new or empty directory as --data-dir")
            if stores.exists() and any(stores.iterdir()):
                raise CliError(f"{stores} is not empty; the demo's story starts from a new bot, so give a new or empty --data-dir")
        temporary = args.stores is None and args.data_dir is None
        asyncio.run(run_demo(open_bot, stores, out=out, progress=sys.stderr, temporary=temporary))
    return 0
