"""`agentloop tasks run`: a task template run by the standard bot (or offline, scripted)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from agentloop.adapters import ConsoleChannel
from agentloop.adapters.llm.scripted import ScriptedLLM
from agentloop.bots import open_bot
from agentloop.cli._options import EXIT_STATUS, MODEL_EPILOG, Commands, CliError, SharedOptions, bot_settings, model_settings
from agentloop.context import Session
from agentloop.messages import LlmRequest, Role
from agentloop.ports import LLM
from agentloop.tasks import Evaluator, TaskTrace, TaskTurn, TemplateRegistry
from agentloop.tasks.errors import ContextManagementWarning, TaskError, TemplateError, UnknownTemplateError
from agentloop.terminal import terminal_line, terminal_text


def register(commands: Commands, options: SharedOptions) -> None:
    """The `tasks` command group: `run`."""
    tasks = commands.add_parser("tasks", help="run task templates", epilog=EXIT_STATUS)
    tasks_commands = tasks.add_subparsers(dest="tasks_command", required=True, metavar="ACTION")
    run = tasks_commands.add_parser(
        "run", parents=[options.data, options.model], help="run a registered task template",
        description="Run TEMPLATE with the standard bot answering each atomic task; prints the result's "
        "content (and its notes). --scripted needs no model: each atomic task answers with its own "
        "instruction, which shows how inputs flow through the template.",
        epilog=f"{MODEL_EPILOG} {EXIT_STATUS}",
    )
    run.add_argument("template", metavar="TEMPLATE", help="the name of the template to run")
    run.add_argument(
        "--input", action="append", default=[], metavar="NAME=VALUE",
        help="a task input; repeat a name to pass a list (the items a reduce runs over)",
    )
    run.add_argument("--templates", default="templates", metavar="PATH", help="a template file or directory (default: ./templates)")
    run.add_argument("--allow-scripts", action="store_true", help="allow script tasks to run their commands")
    run.add_argument("--scripted", action="store_true", help="answer atomic tasks offline with a scripted echo, no model")
    run.add_argument("--trace", action="store_true", help="print what every task answered before the result")
    run.set_defaults(handler=_tasks_run)


def echo_instruction(request: LlmRequest) -> str:
    """The offline model of `tasks run --scripted`: answers with the task's instruction.

    The instruction is the first paragraph of the last user message (a task turn's
    prompt starts with it), so a run shows how inputs were substituted and in what
    order the tasks ran, without a model.
    """
    user = next((m.content for m in reversed(request.messages) if m.role is Role.USER and m.content), "")
    instruction = user.split("\n\n")[0].strip()
    return f"[scripted] {instruction}"


def parse_inputs(pairs: Sequence[str]) -> dict[str, str | list[str]]:
    """`k=v` pairs as task inputs; a name given more than once becomes a list (the items of a reduce)."""
    inputs: dict[str, str | list[str]] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise CliError(f"--input expects NAME=VALUE, got {pair!r}")
        earlier = inputs.get(name)
        if earlier is None:
            inputs[name] = value
        else:
            inputs[name] = [*([earlier] if isinstance(earlier, str) else earlier), value]
    return inputs


def load_registry(path: Path, *, allow_scripts: bool) -> TemplateRegistry:
    """The templates of a file or directory; their warnings are printed on stderr."""
    if not path.exists():
        raise CliError(f"{path} does not exist; pass --templates FILE_OR_DIR")
    registry = TemplateRegistry(allow_scripts=allow_scripts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ContextManagementWarning)
        loaded = registry.register_directory(path) if path.is_dir() else registry.register_file(path)
    for notice in loaded.warnings:
        print(f"agentloop: warning: {notice}", file=sys.stderr)
    return registry


def _tasks_run(args: argparse.Namespace, out: TextIO) -> int:
    inputs = parse_inputs(args.input)
    registry = load_registry(Path(args.templates), allow_scripts=args.allow_scripts)
    try:
        registry.get(args.template)
    except UnknownTemplateError as error:
        raise CliError(f"{error} from {args.templates}") from error
    llm: LLM = ScriptedLLM(echo_instruction) if args.scripted else model_settings(args).llm()
    trace = TaskTrace()
    where = bot_settings(args)
    with open_bot(where.stores, llm, ConsoleChannel(out), bot=where.bot, inputs=(TaskTurn,)) as bot:
        evaluator = Evaluator(registry, bot.loop, session=Session(f"tasks-{args.template}"))
        try:
            result = asyncio.run(evaluator.run(args.template, inputs, trace=trace))
        except (TaskError, TemplateError) as error:
            raise CliError(f"task {args.template!r} failed after {trace.turns} turn(s): {error}") from error
    if args.trace:
        print(terminal_text(trace.render()), end="\n\n", file=out)
    print(terminal_text(result.content), file=out)
    if result.notes:
        print(terminal_line(f"notes: {json.dumps(result.notes, ensure_ascii=False, default=repr)}"), file=out)
    return 0
