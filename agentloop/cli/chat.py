"""`agentloop chat`: a bot at the console, the standard one or yours, on a model server."""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any, TextIO, cast

import structlog
from structlog.typing import EventDict

from agentloop.adapters import ConsoleChannel, Stores, open_note_taking, open_stores
from agentloop.adapters.errors import StoreUrlError
from agentloop.adapters.urls import shown_url
from agentloop.bots import BotSettings, apply_budgets, built_pipeline, open_bot, pipeline_note_taking, release_budgets, user_tools
from agentloop.cli._options import (
    MODEL_EPILOG, Commands, CliError, SharedOptions, add_budgets, add_mid_turn, budgets_of, bot_settings, model_settings, otel_from_environment, seconds,
)
from agentloop.cli.repl import Chat, LogAboveSpinner, Spinner, converse
from agentloop.context import Session
from agentloop.logging import configure_logging
from agentloop.loop import AgentLoop
from agentloop.mid_turn import MidTurnPolicy
from agentloop.notes import NoteTaking
from agentloop.ports import LLM, Channel


def register(commands: Commands, options: SharedOptions) -> None:
    """The `chat` command."""
    chat = commands.add_parser(
        "chat", parents=[options.data, options.model, options.otel], help="talk to a bot on an OpenAI-compatible endpoint",
        description="An interactive console bot: one turn per line of standard input (piped input works), "
        "replies streamed to standard output, history and memory kept in the data directory. /good or /bad rate "
        "the last answer; /bye, /quit, end of input (Ctrl-D) or Ctrl-C at the prompt end the session, which is then distilled. "
        "Ctrl-C during a turn cancels that turn. At a terminal a line typed during a turn is sent at once, "
        "and --mid-turn decides what it gets.",
        epilog=f"{MODEL_EPILOG} exit status: 0 the session ended; 1 an error, explained in one line on stderr; "
        "2 a usage error; 130 Ctrl-C at the prompt.",
    )
    chat.add_argument("--session", default="console", help="the session id; reuse it to continue a conversation")
    chat.add_argument("--user", default="local", help="the user id (memory is shared across a user's sessions)")
    chat.add_argument("--timeout", type=seconds, metavar="SECONDS", help="the turn deadline: past it the bot answers with a fallback (default: none)")
    yours = chat.add_mutually_exclusive_group()
    yours.add_argument(
        "--pipeline", metavar="MODULE:FACTORY",
        help="your pipeline instead of the standard one: a factory taking llm, channel and stores by name (or nothing), "
        "returning an AgentLoop, a list of systems or a builder",
    )
    yours.add_argument("--tools", metavar="MODULE", help="add the @tool functions (and Tool objects) of MODULE to the standard pipeline")
    chat.add_argument(
        "--verbose", action="store_true",
        help="log a tool's or system's failure with its traceback on stderr, besides its line in the conversation",
    )
    add_mid_turn(chat)
    add_budgets(chat)
    chat.set_defaults(handler=_chat)


def _chat(args: argparse.Namespace, out: TextIO) -> int:
    llm = model_settings(args).llm()
    where = bot_settings(args)
    spinner = Spinner(sys.stderr) if sys.stderr.isatty() else None
    _log_to_console(args.log_level or "WARNING", spinner, verbose=args.verbose)
    channel = ConsoleChannel(out, before_output=spinner.stop if spinner is not None else None)
    with ExitStack() as stack:
        stack.enter_context(otel_from_environment(args.otel, "agentloop-chat"))
        if args.pipeline is None:
            tools = user_tools(args.tools) if args.tools is not None else []
            bot = stack.enter_context(open_bot(where.stores, llm, channel, bot=where.bot, tools=tools))
            loop, note_taking, stores = bot.loop, bot.note_taking, bot.pipeline.stores
        else:
            loop, note_taking, stores = _user_bot(stack, where, args.pipeline, llm, channel)
        if args.timeout is not None:
            loop.turn_timeout = args.timeout
        loop.mid_turn = MidTurnPolicy(args.mid_turn)
        apply_budgets(loop, budgets_of(args))
        stack.callback(lambda: asyncio.run(release_budgets(loop)))  # before the stores close
        session = Session(args.session, user_id=args.user)
        chat = Chat(loop, note_taking, session, spinner, approvals=None if stores is None else stores.approvals)
        status = converse(chat, sys.stdin)
    return status


def _log_to_console(level: str, spinner: Spinner | None, *, verbose: bool) -> None:
    """Log lines on stderr above the spinner; without `verbose`, a turn's failure is said only by
    its line in the conversation, and another event's exception is left out of its line."""
    stream = cast(TextIO, LogAboveSpinner(spinner)) if spinner is not None else None  # written like a TextIO
    configure_logging(level, stream=stream)
    if not verbose:
        structlog.configure(processors=[_without_tracebacks, *structlog.get_config()["processors"]])


def _without_tracebacks(logger: object, method_name: str, event_dict: EventDict) -> EventDict:
    """A structlog processor: drops a turn's failure event (the chat says it), names another event's exception in one field."""
    exc_info = event_dict.pop("exc_info", None)
    if not exc_info:
        return event_dict
    if "turn_id" in event_dict:  # the chat prints the turn's failures itself
        raise structlog.DropEvent
    error = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1] if exc_info is True else exc_info[1]
    if error is not None:
        event_dict.setdefault("error", f"{type(error).__name__}: {error}")
    return event_dict


def _user_bot(
    stack: ExitStack, where: BotSettings, target: str, llm: LLM, channel: Channel
) -> tuple[AgentLoop, NoteTaking, Stores]:
    """The pipeline of `--pipeline MODULE:FACTORY` on the bot's stores, the note-taking that ends
    its sessions (the pipeline's own when it has one: it holds what was captured), and the stores."""
    try:
        opened = stack.enter_context(open_stores(where.stores, bot=where.bot))
        offered: dict[str, Callable[[], Any]] = {"llm": lambda: llm, "channel": lambda: channel, "stores": lambda: opened}
        loop = stack.enter_context(built_pipeline(target, offered))
        note_taking = pipeline_note_taking(loop) or stack.enter_context(open_note_taking(opened, llm))
    except StoreUrlError:
        raise  # says what is wrong with the URL itself
    except (OSError, ValueError, sqlite3.Error) as error:
        raise CliError(f"cannot open the bot {where.bot!r} in {shown_url(where.stores)}: {shown_url(str(error))}") from error
    return loop, note_taking, opened
