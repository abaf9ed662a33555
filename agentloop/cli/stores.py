"""`agentloop stores`: migrate a bot's stores (and its PostgreSQL inbox), embed them again, prune them,
or erase or export what they keep about a user, a session or a tenant chain."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sqlite3
from typing import TextIO

import attrs

from agentloop.adapters import HashingEmbedder, Stores, WordLlamaEmbedder, default_embedder, open_stores, reembed_stores
from agentloop.adapters.errors import StoreUrlError
from agentloop.adapters.retention import prune_stores
from agentloop.adapters.urls import is_postgres_url, shown_url
from agentloop.bots import API_KEY_VARIABLES, DEFAULT_BASE_URL, api_key_from
from agentloop.cli._options import EXIT_STATUS, Commands, CliError, SharedOptions
from agentloop.cli.worker import workers_package
from agentloop.errors import LlmCallError
from agentloop.ports import Embedder
from agentloop.privacy import Subject, chained, json_array
from agentloop.retention import SETTINGS, Retention, load_retention, retention_from
from agentloop.scopes import DEFAULT_COMPANY


def register(commands: Commands, options: SharedOptions) -> None:
    """The `stores` command group: `migrate`, `reembed`, `erase`, `export` and `prune`."""
    stores = commands.add_parser("stores", help="manage a bot's stores", epilog=EXIT_STATUS)
    stores_commands = stores.add_subparsers(dest="stores_command", required=True, metavar="ACTION")
    embedding = _embedder_options()
    migrate = stores_commands.add_parser(
        "migrate", parents=[embedding], help="bring a bot's stores (and a PostgreSQL inbox) to this release's schemas",
        description="Open the stores of --bot at URL, migrating every schema that is older (a newer one is refused "
        "and left unchanged), then close them. For a postgresql URL the inbox tables and procrastinate's schema "
        "are created or migrated too. Opening a bot migrates it anyway; this runs it explicitly, before a deploy.",
        epilog=EXIT_STATUS,
    )
    migrate.add_argument("url", metavar="URL", help="sqlite:///DIR, a directory, or postgresql://USER@HOST/DB")
    migrate.add_argument("--bot", default="bot", help="the bot's name (default: bot)")
    migrate.set_defaults(handler=_stores_migrate)
    reembed = stores_commands.add_parser(
        "reembed", parents=[embedding], help="embed every stored text and note again with another embedder",
        description="Replace the vectors of every RAG text and note of the bot with those of SPEC (default: the "
        "default embedder, wordllama) and record it, "
        "so the stores open with it from now on (texts and notes are unchanged). Stop the bot first.",
        epilog=EXIT_STATUS,
    )
    reembed.add_argument("url", metavar="URL", help="the bot's stores: sqlite:///DIR, a directory path or postgresql://...")
    reembed.add_argument("--bot", default="bot", help="the bot's name (default: bot)")
    reembed.add_argument("--batch-size", type=int, default=64, metavar="N", help="texts per embedding call (default: 64)")
    reembed.set_defaults(handler=_stores_reembed)
    subject = _subject_options()
    erase = stores_commands.add_parser(
        "erase", parents=[subject], help="remove everything the bot keeps about a user, a session or a tenant chain",
        description="Remove the rows of the subject from every store of --bot at URL (history, memory, RAG texts, "
        "notes distilled from its sessions, trajectories, tasks, approvals, usage, summaries), each store in one "
        "transaction, and record who did it in the audit log. Running it again removes nothing more.",
        epilog=EXIT_STATUS,
    )
    erase.set_defaults(handler=_stores_erase)
    export = stores_commands.add_parser(
        "export", parents=[subject], help="write everything the bot keeps about a subject as JSON",
        description="Write every row the stores of --bot at URL keep about the subject as one JSON array of records "
        "(each with its store and kind; docs/privacy.md gives their shapes), written as it is read. The export is "
        "recorded in the audit log.",
        epilog=EXIT_STATUS,
    )
    export.set_defaults(handler=_stores_export)
    _register_prune(stores_commands)


def _subject_options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("url", metavar="URL", help="the bot's stores: sqlite:///DIR, a directory path or postgresql://...")
    options.add_argument("--bot", default="bot", help="the bot's name (default: bot)")
    options.add_argument("--company", default=DEFAULT_COMPANY, help=f"the company (default: {DEFAULT_COMPANY})")
    options.add_argument("--org", default=None, help="the org (default: none)")
    options.add_argument("--team", default=None, help="narrow to one team")
    options.add_argument("--project", default=None, help="narrow to one project")
    whose = options.add_mutually_exclusive_group(required=True)
    whose.add_argument("--user", default=None, help="the user whose data it is")
    whose.add_argument("--session", default=None, help="the session whose data it is")
    whose.add_argument("--whole-chain", action="store_true", help="every row of the company, org (and team or project) given")
    options.add_argument("--actor", default=None, help="who asks, for the audit log (default: cli:<login name>)")
    return options


def _subject(args: argparse.Namespace) -> Subject:
    if args.session is not None:
        return Subject.session(args.session, company_id=args.company, org_id=args.org)
    if args.user is not None:
        return Subject.user(args.user, company_id=args.company, org_id=args.org, team_id=args.team, project_id=args.project)
    return Subject.chain(company_id=args.company, org_id=args.org, team_id=args.team, project_id=args.project)


def _actor(args: argparse.Namespace) -> str:
    return str(args.actor or f"cli:{getpass.getuser()}")


def _embedder_options() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--embedder", default=None, metavar="SPEC",
        help="the embedder: wordllama (the default, 256 dimensions), wordllama:DIM (64 or 128), hashing (384 "
        "dimensions, no model), hashing:DIM, openai:MODEL (an embeddings endpoint at --base-url) or st:MODEL_DIR "
        "(a local sentence-transformers model); migrate keeps the one the stores were built with",
    )
    options.add_argument(
        "--base-url", default=os.environ.get("AGENTLOOP_BASE_URL", DEFAULT_BASE_URL), metavar="URL",
        help=f"the OpenAI-compatible endpoint of openai:MODEL (default: $AGENTLOOP_BASE_URL or {DEFAULT_BASE_URL})",
    )
    return options


def embedder_from_spec(spec: str, *, base_url: str) -> Embedder:
    """The embedder a command-line SPEC names: `wordllama[:DIM]`, `hashing[:DIM]`, `openai:MODEL`
    (at `base_url`, key from the environment) or `st:DIR_OR_NAME` (a local sentence-transformers model)."""
    kind, _, detail = spec.partition(":")
    try:
        if kind == "wordllama":
            return WordLlamaEmbedder(int(detail)) if detail else WordLlamaEmbedder()
        if kind == "hashing":
            return HashingEmbedder(int(detail)) if detail else HashingEmbedder()
        if kind == "openai" and detail:
            from agentloop.adapters.embedders.openai import OpenAIEmbedder

            return OpenAIEmbedder(base_url, detail, api_key=api_key_from(API_KEY_VARIABLES))
        if kind == "st" and detail:
            from agentloop.adapters.embedders.sentence_transformers import SentenceTransformerEmbedder

            return SentenceTransformerEmbedder(detail)
    except (ValueError, OSError, ImportError, LlmCallError) as error:
        raise CliError(f"cannot make the embedder {spec!r}: {error}") from error
    raise CliError(f"--embedder {spec!r} names no embedder; give wordllama, wordllama:DIM, hashing, hashing:DIM, openai:MODEL or st:MODEL_DIR")


def _stores_migrate(args: argparse.Namespace, out: TextIO) -> int:
    shown = shown_url(args.url)
    embedder = None if args.embedder is None else embedder_from_spec(args.embedder, base_url=args.base_url)
    open_stores(args.url, bot=args.bot, embedder=embedder).close()
    print(f"stores of bot {args.bot!r} at {shown}: up to date", file=out)
    if is_postgres_url(args.url):
        workers = workers_package()
        asyncio.run(workers.migrate_inbox(args.url))
        print(f"inbox at {shown}: up to date (schema version {workers.SCHEMA_VERSION})", file=out)
    return 0


def _stores_reembed(args: argparse.Namespace, out: TextIO) -> int:
    embedder = default_embedder() if args.embedder is None else embedder_from_spec(args.embedder, base_url=args.base_url)
    try:
        done = reembed_stores(args.url, bot=args.bot, embedder=embedder, batch_size=args.batch_size)
    except StoreUrlError:
        raise  # says what is wrong with the URL itself
    except (OSError, ValueError, LlmCallError, sqlite3.Error) as error:
        raise CliError(f"cannot re-embed the bot {args.bot!r} at {args.url}: {error}") from error
    print(f"re-embedded {done.texts} text(s) and {done.notes} note(s) of the bot {args.bot!r} with {embedder.name!r}", file=out)
    return 0


def _stores_erase(args: argparse.Namespace, out: TextIO) -> int:
    subject = _subject(args)
    with open_stores(args.url, bot=args.bot, create=False) as stores:
        erased = asyncio.run(stores.erase(subject, actor=_actor(args)))
    for name, count in attrs.asdict(erased).items():
        print(f"{name}: {count}", file=out)
    if is_postgres_url(args.url):
        print(f"inbox: {asyncio.run(workers_package().erase_inbox(args.url, args.bot, subject))}", file=out)
    print(f"erased {erased.total} row(s) of {subject.kind.value} {args.user or args.session or 'chain'!r} "
          f"of the bot {args.bot!r} at {shown_url(args.url)}", file=out)
    return 0


def _stores_export(args: argparse.Namespace, out: TextIO) -> int:
    subject = _subject(args)
    with open_stores(args.url, bot=args.bot, create=False) as stores:
        asyncio.run(_write_export(stores, subject, _actor(args), out))
    return 0


async def _write_export(stores: Stores, subject: Subject, actor: str, out: TextIO) -> None:
    """The records as one JSON array, each written as it is read (a long history never sits in memory whole)."""
    records = stores.export(subject, actor=actor)
    if is_postgres_url(stores.url):
        records = chained(records, workers_package().export_inbox(stores.url, stores.bot, subject))
    async for text in json_array(records):
        out.write(text)


_RETENTION_FLAGS = {
    "history_days": "delete histories whose last message is older than N days",
    "history_turns": "keep only each history's newest N turns",
    "trajectories_days": "delete tool executions N days after their session was distilled",
    "inbox_days": "delete finished inbox messages (PostgreSQL) N days after they finished",
    "usage_days": "roll usage older than N days up into one row per day, session and model",
    "summaries_days": "delete history summaries older than N days",
    "approvals_days": "delete decided approvals asked for more than N days ago",
}


def _register_prune(stores_commands: Commands) -> None:
    """`stores prune`: apply a retention file or flags to a bot's stores, then compact them."""
    prune = stores_commands.add_parser(
        "prune", help="delete what the retention settings let go, then compact the stores",
        description="Delete from the stores of --bot at URL what the retention settings let go (a TOML file given "
        "by --retention, each flag overriding its setting), then compact them so their space and search time come "
        "back (SQLite: FTS5 optimize and VACUUM; PostgreSQL: VACUUM). Safe while the bot runs, except --vectors on "
        "SQLite. Prints what was deleted and the size before and after.",
        epilog=EXIT_STATUS,
    )
    prune.add_argument("url", metavar="URL", help="the bot's stores: sqlite:///DIR, a directory path or postgresql://...")
    prune.add_argument("--bot", default="bot", help="the bot's name (default: bot)")
    prune.add_argument("--retention", metavar="FILE", help="a TOML file of retention settings (its [retention] table)")
    for setting, meaning in _RETENTION_FLAGS.items():
        prune.add_argument(f"--{setting.replace('_', '-')}", dest=setting, type=int, metavar="N", help=meaning)
    prune.add_argument("--no-compact", action="store_true", help="delete only; leave the files and tables as they are")
    prune.add_argument(
        "--vectors", action="store_true",
        help="rebuild the vector indexes too (SQLite: dropped and rebuilt at the next open, so stop the bot first; "
        "PostgreSQL: REINDEX CONCURRENTLY)",
    )
    prune.set_defaults(handler=_stores_prune)


def retention_of(args: argparse.Namespace) -> Retention:
    """The retention `stores prune` was given: its --retention file, each flag given overriding it."""
    base = Retention() if args.retention is None else load_retention(args.retention)
    given = {setting: getattr(args, setting) for setting in SETTINGS if getattr(args, setting) is not None}
    kept = {setting: getattr(base, setting) for setting in SETTINGS if getattr(base, setting) is not None}
    return retention_from({**kept, **given, "every_minutes": base.every_minutes}, where="the prune flags")


def _stores_prune(args: argparse.Namespace, out: TextIO) -> int:
    retention = retention_of(args)
    if retention.empty:
        print("no retention setting given: nothing is deleted, the stores are only compacted", file=out)
    report = prune_stores(args.url, bot=args.bot, retention=retention, compact=not args.no_compact, vectors=args.vectors)
    print(f"stores of bot {args.bot!r} at {shown_url(args.url)}: {report.line()}", file=out)
    return 0
