"""The `agentloop` command: one module per command group (its parser and its handler together)
over the composition root in `agentloop.bots`.

Every command that runs or inspects a bot opens it with `open_bot` (or builds the user's
pipeline with `built_pipeline`), so the demo, chat, notes and `pipeline show` see the same
standard pipeline. Any `AgentloopError` a command raises is printed as one line (exit status 1).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

import structlog

from agentloop.cli import chat, demo, eval, mcp, notes, pipeline, serve, stores, tasks, telegram, templates, usage, worker
from agentloop.cli._options import DEFAULT_DATA_DIR, DEFAULT_MODEL, EXIT_STATUS, CliError, SharedOptions
from agentloop.cli.pipeline import describe_pipeline
from agentloop.cli.repl import Chat, Spinner, converse
from agentloop.cli.stores import embedder_from_spec
from agentloop.cli.tasks import echo_instruction, load_registry, parse_inputs
from agentloop.errors import AgentloopError
from agentloop.logging import configure_logging
from agentloop.terminal import terminal_text

__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_MODEL",
    "EXIT_STATUS",
    "Chat",
    "CliError",
    "Spinner",
    "build_parser",
    "converse",
    "describe_pipeline",
    "echo_instruction",
    "embedder_from_spec",
    "load_registry",
    "main",
    "parse_inputs",
]

COMMAND_GROUPS = (demo, chat, pipeline, templates, notes, tasks, stores, usage, worker, serve, mcp, telegram, eval)
"""Each registers its parser (in this order in `--help`) with its handler as the `handler` default."""


def build_parser() -> argparse.ArgumentParser:
    """The `agentloop` parser: the global options, then every command group's own."""
    parser = argparse.ArgumentParser(prog="agentloop", description="Build and run agentloop bots.", epilog=EXIT_STATUS)
    parser.add_argument(
        "--log-level", metavar="LEVEL",
        help="structlog events at this level and above go to stderr: DEBUG, INFO, WARNING, ERROR "
        "(default: WARNING; ERROR for demo, whose failures are staged)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    options = SharedOptions()
    for group in COMMAND_GROUPS:
        group.register(commands, options)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; returns the exit status. Logging is configured for the
    command and restored afterwards, so `main` can be called in-process (tests)."""
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace, TextIO], int] = args.handler
    logging_before = structlog.get_config()
    try:
        configure_logging(args.log_level or getattr(args, "quiet_log_level", "WARNING"))
        return handler(args, out or sys.stdout)
    except AgentloopError as error:  # a store failing mid-command is said in one line too
        print(terminal_text(f"agentloop: {error}"), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("agentloop: interrupted", file=sys.stderr)
        return 130
    finally:
        structlog.configure(**logging_before)
