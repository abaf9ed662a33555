"""`agentloop usage`: the tokens and cost a bot's model calls spent, by tenant, user, session or day."""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime
from typing import TextIO

from agentloop.adapters import open_stores
from agentloop.cli._options import EXIT_STATUS, Commands, SharedOptions
from agentloop.ports import UsageFilter, UsageGroup, UsageTotal
from agentloop.terminal import terminal_line

COLUMNS = ("calls", "input", "cache read", "cache write", "output", "cost")


def register(commands: Commands, options: SharedOptions) -> None:
    """The `usage` command."""
    usage = commands.add_parser(
        "usage", parents=[options.chain], help="tokens and cost of a bot's model calls, summed", epilog=EXIT_STATUS,
        description="Sum the usage a bot recorded: tokens in (the whole prompt, cached part included), read from and "
        "written to the prompt cache, out, and the cost in US dollars. A model whose price is not known is shown as "
        "unknown, never as zero. --company/--org/--team/--project/--user/--session narrow the sum (any, when not given).",
    )
    usage.add_argument("url", metavar="URL", help="the bot's stores: sqlite:///DIR, a directory path or postgresql://...")
    usage.add_argument("--bot", default="bot", help="the bot's name (default: bot)")
    usage.add_argument("--by", choices=[g.value for g in UsageGroup], default="tenant", help="one line per ... (default: tenant)")
    usage.add_argument("--since", type=_time, metavar="WHEN", help="only turns at or after WHEN: YYYY-MM-DD or an ISO time (UTC unless it says)")
    usage.add_argument("--until", type=_time, metavar="WHEN", help="only turns before WHEN")
    usage.add_argument("--user", help="only this user's turns")
    usage.add_argument("--session", help="only this session's turns")
    usage.set_defaults(handler=_usage)


def _time(text: str) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected YYYY-MM-DD or an ISO time, got {text!r}") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def cost_text(total: UsageTotal) -> str:
    """The cost in dollars; "unknown" when no call had a known price, the known part "+ unknown" when some had none."""
    if total.unpriced_calls and total.unpriced_calls == total.calls:
        return "unknown"
    known = f"${total.cost:.4f}"
    return f"{known} + unknown" if total.unpriced_calls else known


def _row(key: str, total: UsageTotal) -> list[str]:
    usage = total.usage
    return [key, str(total.calls), str(usage.input_tokens), str(usage.cache_read_tokens), str(usage.cache_write_tokens),
            str(usage.output_tokens), cost_text(total)]


def _usage(args: argparse.Namespace, out: TextIO) -> int:
    where = UsageFilter(args.company, args.org, args.team, args.project, args.user, args.session, args.since, args.until)
    by = UsageGroup(args.by)
    with open_stores(args.url, bot=args.bot, create=False) as stores:  # the embedder its vectors were made with
        lines = asyncio.run(stores.usage.report(where, by))
    total = UsageTotal()
    rows = [[by.value, *COLUMNS]]
    for line in lines:
        rows.append(_row(terminal_line(line.key), line.total))
        total += line.total
    rows.append(_row("total", total))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [cell.ljust(width) if i == 0 else cell.rjust(width) for i, (cell, width) in enumerate(zip(row, widths, strict=True))]
        out.write("  ".join(cells).rstrip() + "\n")
    return 0
