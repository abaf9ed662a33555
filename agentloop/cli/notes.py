"""`agentloop notes`: list, show, search and curate the notes a bot distilled."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from agentloop.adapters import ConsoleChannel
from agentloop.adapters.llm.scripted import ScriptedLLM
from agentloop.bots import open_bot
from agentloop.cli._options import EXIT_STATUS, Commands, SharedOptions, bot_settings
from agentloop.notes import KnowledgeBase, KnowledgeItem, Layer, LayerIds, NoteStatus
from agentloop.scopes import DEFAULT_COMPANY
from agentloop.terminal import terminal_line, terminal_text


def register(commands: Commands, options: SharedOptions) -> None:
    """The `notes` command group: list, show, search, the status moves and merges."""
    notes = commands.add_parser(
        "notes", help="review the notes a bot distilled", epilog=EXIT_STATUS,
        description="Inspect and curate a bot's knowledge base in its data directory.",
    )
    notes_commands = notes.add_subparsers(dest="notes_command", required=True, metavar="ACTION")
    listing = notes_commands.add_parser(
        "list", parents=[options.data, options.chain], help="every note, or those a chain may see, one line each", epilog=EXIT_STATUS,
        description="List the bot's notes. Given any of --company/--org/--team/--project, only the notes a session "
        "of that chain would see are listed; without them, every note of every tenant.",
    )
    listing.add_argument("--status", choices=[s.value for s in NoteStatus], help="only notes with this status")
    listing.set_defaults(handler=_notes_list)
    show_note = notes_commands.add_parser("show", parents=[options.data], help="one note in full", epilog=EXIT_STATUS)
    show_note.add_argument("id", type=int, metavar="ID")
    show_note.set_defaults(handler=_notes_show)
    search = notes_commands.add_parser(
        "search", parents=[options.data, options.chain], help="the notes a query would retrieve (counts nothing)", epilog=EXIT_STATUS,
        description="Search as a session of the given org/team/project would: only notes in that chain are seen.",
    )
    search.add_argument("query", metavar="QUERY")
    search.add_argument("-k", type=int, default=5, help="how many notes at most (default: 5)")
    search.set_defaults(handler=_notes_search)
    for action, target, what in (
        ("propose", NoteStatus.PROPOSED, "draft -> proposed"),
        ("accept", NoteStatus.ACCEPTED, "proposed -> accepted"),
        ("reject", NoteStatus.REJECTED, "draft or proposed -> rejected"),
        ("deprecate", NoteStatus.DEPRECATED, "accepted -> deprecated"),
    ):
        move = notes_commands.add_parser(action, parents=[options.data], help=f"move a note {what}", epilog=EXIT_STATUS)
        move.add_argument("id", type=int, metavar="ID")
        move.set_defaults(handler=_notes_transition, target=target)
    merges = notes_commands.add_parser("merges", parents=[options.data], help="pairs of accepted notes worth merging", epilog=EXIT_STATUS)
    merges.set_defaults(handler=_notes_merges)


@contextmanager
def _knowledge(args: argparse.Namespace, out: TextIO) -> Iterator[KnowledgeBase]:
    """The knowledge base of an existing bot (opened with a placeholder model: no turn runs)."""
    where = bot_settings(args)
    with open_bot(where.stores, ScriptedLLM(), ConsoleChannel(out), bot=where.bot, create=False) as bot:
        yield bot.note_taking.knowledge


def _note_line(item: KnowledgeItem) -> str:
    flag = "  flagged for review" if item.flagged_for_review else ""
    return (
        f"#{item.id}  {item.status.value:<10} {item.type.value:<10} {item.layer.value:<8} "
        f"retrieved {item.retrieval_count}  useful {item.usefulness_score}  {terminal_line(item.title)}{flag}"
    )


def _caller(args: argparse.Namespace) -> LayerIds:
    """The tenant chain named by --company/--org/--team/--project."""
    return LayerIds(args.company or DEFAULT_COMPANY, org_id=args.org, team_id=args.team, project_id=args.project)


def _within(caller: LayerIds) -> str:
    return f"within {caller.narrowest().value} {caller.id_at(caller.narrowest())!r} and its parents"


def _notes_list(args: argparse.Namespace, out: TextIO) -> int:
    statuses = None if args.status is None else frozenset({NoteStatus(args.status)})
    chained = any(value is not None for value in (args.company, args.org, args.team, args.project))
    with _knowledge(args, out) as knowledge:
        items = asyncio.run(knowledge.repository.items(statuses))
    if chained:
        visible = _caller(args).visible_owners()
        items = [item for item in items if item.layer_ids in visible]
    for item in items:
        print(_note_line(item), file=out)
    if not items:
        status = "" if args.status is None else f" with status {args.status}"
        print(f"no notes{status}" + (f" {_within(_caller(args))}" if chained else ""), file=out)
    return 0


def _notes_show(args: argparse.Namespace, out: TextIO) -> int:
    with _knowledge(args, out) as knowledge:
        item = asyncio.run(knowledge.get(args.id))
    print(_note_line(item), file=out)
    owner = ", ".join(f"{layer.value}={item.layer_ids.id_at(layer)}" for layer in Layer if item.layer_ids.id_at(layer))
    print(terminal_line(f"owner: {owner}; created {item.created_at.isoformat()}; referenced {item.reference_count}"), file=out)
    print(f"\n{terminal_text(item.markdown.strip())}", file=out)
    return 0


def _notes_search(args: argparse.Namespace, out: TextIO) -> int:
    caller = _caller(args)
    with _knowledge(args, out) as knowledge:
        found = asyncio.run(knowledge.search(args.query, caller, k=args.k))
    for retrieved in found:
        print(f"{retrieved.similarity:.2f}  {_note_line(retrieved.item)}", file=out)
    if not found:
        print(f"no notes match {_within(caller)}", file=out)
    return 0


def _notes_transition(args: argparse.Namespace, out: TextIO) -> int:
    with _knowledge(args, out) as knowledge:
        before = asyncio.run(knowledge.get(args.id)).status
        after = asyncio.run(knowledge.transition(args.id, args.target))
    print(f"note #{after.id}: {before.value} -> {after.status.value}", file=out)
    return 0


def _notes_merges(args: argparse.Namespace, out: TextIO) -> int:
    with _knowledge(args, out) as knowledge:
        suggestions = asyncio.run(knowledge.merge_suggestions())
        for suggestion in suggestions:
            first, second = asyncio.run(knowledge.get(suggestion.first_id)), asyncio.run(knowledge.get(suggestion.second_id))
            titles = f"#{first.id} {first.title!r} + #{second.id} {second.title!r}"  # repr escapes what a terminal would run
            print(f"{titles}: similarity {suggestion.similarity:.2f}", file=out)
    if not suggestions:
        print("no merge suggestions", file=out)
    return 0
