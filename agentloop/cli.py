"""The `agentloop` command: the composition root that wires adapters to systems."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from agentloop.errors import PipelineError
from agentloop.loop import AgentLoop, PipelineDescription
from agentloop.system import System


class CliError(Exception):
    """A problem the user can fix; printed as one line, exit status 1."""


def load_pipeline(target: str) -> AgentLoop:
    """Import `module:factory` and build the AgentLoop it describes.

    The factory is called with no arguments and may return an AgentLoop, a sequence of
    systems, or a builder with a `build()` method returning an AgentLoop.
    """
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise CliError(f"expected MODULE:FACTORY, got {target!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise CliError(f"cannot import {module_name!r}: {error}") from error
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise CliError(f"{module_name!r} has no callable {attribute!r}")
    try:
        built = factory()
        if hasattr(built, "build") and callable(built.build):
            built = built.build()
        if isinstance(built, AgentLoop):
            return built
        if isinstance(built, Sequence) and all(isinstance(s, System) for s in built):
            return AgentLoop(built)
    except PipelineError as error:
        raise CliError(f"{target} does not build: {error}") from error
    raise CliError(f"{target} returned {type(built).__name__}; expected an AgentLoop, a list of systems or a builder")


def _pipeline_show(args: argparse.Namespace, out: TextIO) -> int:
    description: PipelineDescription = load_pipeline(args.target).describe()
    print(description.to_mermaid() if args.mermaid else description.to_text(), file=out)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentloop", description="Build and run agentloop bots.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    pipeline = commands.add_parser("pipeline", help="inspect a pipeline")
    pipeline_commands = pipeline.add_subparsers(dest="pipeline_command", required=True, metavar="ACTION")
    show = pipeline_commands.add_parser("show", help="print the ordered pipeline table or a Mermaid graph")
    show.add_argument("target", metavar="MODULE:FACTORY", help="a factory returning a pipeline")
    show.add_argument("--mermaid", action="store_true", help="print a Mermaid flowchart instead of a table")
    show.set_defaults(handler=_pipeline_show)
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace, TextIO], int] = args.handler
    try:
        return handler(args, out or sys.stdout)
    except CliError as error:
        print(f"agentloop: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
