"""`agentloop pipeline show`: the ordered table of a pipeline's systems, or a Mermaid graph."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any, TextIO

from agentloop.adapters import ConsoleChannel, Stores, open_stores
from agentloop.adapters.llm.scripted import ScriptedLLM
from agentloop.bots import built_pipeline, open_bot
from agentloop.cli._options import EXIT_STATUS, Commands, SharedOptions
from agentloop.loop import PipelineDescription


def register(commands: Commands, options: SharedOptions) -> None:
    """The `pipeline` command group: `show`."""
    pipeline = commands.add_parser("pipeline", help="inspect a pipeline", epilog=EXIT_STATUS)
    pipeline_commands = pipeline.add_subparsers(dest="pipeline_command", required=True, metavar="ACTION")
    show = pipeline_commands.add_parser(
        "show", help="print the ordered pipeline table or a Mermaid graph",
        description="Print the systems in run order with what each reads and writes: the standard pipeline, "
        "or yours given as MODULE:FACTORY (a callable returning an AgentLoop, a list of systems or a builder; "
        "it may take llm, channel and stores by name, given a scripted model, the console and scratch stores).",
        epilog=EXIT_STATUS,
    )
    show.add_argument("target", nargs="?", metavar="MODULE:FACTORY", help="a factory returning a pipeline (default: the standard pipeline)")
    show.add_argument("--mermaid", action="store_true", help="print a Mermaid flowchart instead of a table")
    show.set_defaults(handler=_pipeline_show)


def describe_pipeline(target: str, out: TextIO) -> PipelineDescription:
    """Import `module:factory` and describe the pipeline it builds; a factory that takes `llm`,
    `channel` or `stores` gets a scripted model, the console and stores in a scratch directory."""
    with ExitStack() as stack:

        def scratch_stores() -> Stores:
            return stack.enter_context(open_stores(stack.enter_context(tempfile.TemporaryDirectory(prefix="agentloop-show-"))))

        offered: dict[str, Callable[[], Any]] = {"llm": ScriptedLLM, "channel": lambda: ConsoleChannel(out), "stores": scratch_stores}
        with built_pipeline(target, offered) as loop:
            return loop.describe()


def _pipeline_show(args: argparse.Namespace, out: TextIO) -> int:
    if args.target is not None:
        description = describe_pipeline(args.target, out)
    else:
        with tempfile.TemporaryDirectory(prefix="agentloop-show-") as scratch, open_bot(
            scratch, ScriptedLLM(), ConsoleChannel(out)
        ) as bot:
            description = bot.loop.describe()
    print(description.to_mermaid() if args.mermaid else description.to_text(), file=out)
    return 0
