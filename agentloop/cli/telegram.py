"""`agentloop telegram`: a bot in Telegram chats, by long polling or a webhook, its turns run here or by the inbox's workers."""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any, TextIO

from agentloop._signals import stop_on_signals
from agentloop.adapters import open_stores
from agentloop.adapters.urls import is_postgres_url
from agentloop.bots import apply_budgets, built_pipeline, check_models, pipeline_note_taking, release_budgets
from agentloop.cli._options import EXIT_STATUS, Commands, CliError, SharedOptions, add_budgets, bot_settings, budgets_of, seconds
from agentloop.cli.worker import workers_package
from agentloop.loop import AgentLoop

TOKEN_VARIABLE = "TELEGRAM_BOT_TOKEN"
SECRET_VARIABLE = "TELEGRAM_WEBHOOK_SECRET"


def register(commands: Commands, options: SharedOptions) -> None:
    """The `telegram` command."""
    telegram = commands.add_parser(
        "telegram", parents=[options.data], help="answer a Telegram bot's chats with a bot",
        description=f"Answer the chats of the Telegram bot whose token is in ${TOKEN_VARIABLE} (from @BotFather) with the "
        "pipeline MODULE:FACTORY builds (its `channel` and `stores` parameters get the Telegram channel and the opened "
        "Stores). Only the chats the --chats file lists are answered; each stands for a user and tenant chain there. "
        "Updates come by long polling, or by --webhook. SIGTERM or Ctrl-C stops it.",
        epilog=EXIT_STATUS,
    )
    telegram.add_argument("--pipeline", required=True, metavar="MODULE:FACTORY", help="a factory taking channel and stores (by those names) and returning an AgentLoop, a list of systems or a builder")
    telegram.add_argument("--chats", required=True, metavar="FILE", help="the TOML chat file: each chat's (or Telegram user's) user, org, team and project")
    telegram.add_argument("--webhook", metavar="URL", help=f"receive updates at this public HTTPS URL instead of polling; its secret comes from ${SECRET_VARIABLE}")
    telegram.add_argument("--host", default="127.0.0.1", help="with --webhook, the address to listen on (default: 127.0.0.1)")
    telegram.add_argument("--port", type=int, default=8443, help="with --webhook, the port to listen on (default: 8443)")
    telegram.add_argument("--api-url", metavar="URL", help="a Bot API server's base URL, the token following it (default: Telegram's)")
    telegram.add_argument("--file-url", metavar="URL", help="its base URL for downloading files (default: Telegram's)")
    telegram.add_argument("--voice", choices=("espeak", "text"), default="text", help="voice replies spoken by espeak-ng, or sent as text (default: text)")
    telegram.add_argument("--voice-name", default="en", help="the espeak-ng voice (default: en)")
    telegram.add_argument("--edit-interval", type=seconds, default=1.0, metavar="SECONDS", help="a streamed answer's message is edited at most this often (default: 1)")
    telegram.add_argument(
        "--inbox", action=argparse.BooleanOptionalAction, default=None,
        help="submit turns to the workers' inbox and run a worker here, so several runners answer each message once "
        "(default: on for postgresql stores, off otherwise)",
    )
    add_budgets(telegram)
    telegram.set_defaults(handler=_telegram)


def _telegram(args: argparse.Namespace, out: TextIO) -> int:
    try:
        from agentloop.adapters.channels import telegram as tg
        from agentloop.adapters.speech.espeak import EspeakSynthesizer
    except ImportError as error:
        raise CliError(f"the Telegram channel needs python-telegram-bot: pip install 'agentloop-ecs[telegram]' ({error})") from error
    token = os.environ.get(TOKEN_VARIABLE)
    if not token:
        raise CliError(f"set ${TOKEN_VARIABLE} to the bot's token, which @BotFather gives when you create the bot (/newbot)")
    where = bot_settings(args)
    inbox_on = is_postgres_url(where.stores) if args.inbox is None else args.inbox
    if inbox_on and not is_postgres_url(where.stores):
        raise CliError("--inbox keeps its messages in PostgreSQL: give --stores postgresql://USER@HOST/DB")
    chats = tg.load_chats(args.chats)
    synthesizer = EspeakSynthesizer(voice=args.voice_name) if args.voice == "espeak" else None
    webhook = None if args.webhook is None else tg.Webhook(args.webhook, args.host, args.port, os.environ.get(SECRET_VARIABLE))
    application = tg.telegram_application(token, base_url=args.api_url, base_file_url=args.file_url)
    channel = tg.TelegramChannel(application.bot, synthesizer=synthesizer, edit_interval=args.edit_interval)
    with (
        open_stores(where.stores, bot=where.bot) as opened,
        built_pipeline(args.pipeline, {"channel": lambda: channel, "stores": lambda: opened}) as loop,
    ):
        check_models(loop)
        apply_budgets(loop, budgets_of(args))

        def telegram_bot(run: Any) -> Any:
            return tg.TelegramBot(application, channel, chats, run, note_taking=pipeline_note_taking(loop), approvals=opened.approvals)

        how = f"webhook {args.webhook}" if webhook is not None else "long polling"
        try:
            asyncio.run(_answer(tg, telegram_bot, loop, where.stores if inbox_on else None, where.bot, webhook, how, out))
        finally:
            asyncio.run(release_budgets(loop))  # before the stores close
    return 0


async def _answer(tg: Any, telegram_bot: Any, loop: AgentLoop, inbox_url: str | None, bot: str, webhook: Any, how: str, out: TextIO) -> None:
    """Answer the chats until SIGTERM or SIGINT: turns run here, or through the inbox with a worker beside the bot."""
    stop = asyncio.Event()
    with stop_on_signals(stop):
        if inbox_url is None:
            print(f"agentloop telegram {os.getpid()}: answering by {how}; SIGTERM stops it", file=out, flush=True)
            await tg.run_until(telegram_bot(tg.direct_turns(loop)), stop, webhook=webhook)
        else:
            workers = workers_package()
            async with workers.open_inbox(inbox_url, bot=bot, pool_size=8, mid_turn=loop.mid_turn) as inbox:
                print(f"agentloop telegram {os.getpid()}: answering by {how}, turns through the inbox {inbox.url}; SIGTERM stops it",
                      file=out, flush=True)
                worker = asyncio.create_task(workers.run_worker(inbox, loop, workers.WorkerSettings(), install_signal_handlers=False))
                try:
                    await tg.run_until(telegram_bot(tg.inbox_turns(inbox)), stop, webhook=webhook)
                finally:
                    worker.cancel()
                    await asyncio.gather(worker, return_exceptions=True)
    print(f"agentloop telegram {os.getpid()}: stopped", file=out, flush=True)
