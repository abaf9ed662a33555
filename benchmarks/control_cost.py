"""What usage accounting and budget checks add to the standard turn, in one run.

Bots of this checkout take turns in rounds, each on its own SQLite stores, the model reporting
usage on every call (as turn_latency.py's does): without usage recording, with it (the standard
pipeline), and with it plus a tenant's daily cost budget and a session's daily token budget (a
reservation before each model call). A second bot without usage recording is timed too: its
ratio to the first is the run's noise floor (two bots that do the same work), so read a ratio
to the target with that much either way. The order rotates each round, so each bot runs in each
position (the first, after a pause, is the slow one) equally often over a multiple of four
rounds; the medians of framework time and the ratios to the first are printed beside the target
(usage accounting and budget checks add <= 10%), for the whole turn (framework time) and until
the user is answered (the usage is recorded after that). Times are printed, never asserted.
With `--notes` the bots also take notes (note retrieval before the model, capture after).

    python benchmarks/control_cost.py [--turns 600] [--rounds 8] [--warmup 100] [--notes]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from time import perf_counter
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from turn_latency import QUESTION, TimedChannel, TimedLLM  # noqa: E402

from agentloop import IncomingMessage, Session  # noqa: E402
from agentloop.budgets import Budgets  # noqa: E402
from agentloop.logging import configure_logging  # noqa: E402
from systems import standard_pipeline  # noqa: E402
from systems.notes import add_note_taking  # noqa: E402
from systems.standard import StandardOptions  # noqa: E402
from systems.usage import UsageRecordingSystem  # noqa: E402

Samples = dict[str, list[float]]
TARGET = 1.10
BUDGETS = ("tenant-daily-cost=1000", "session-daily-tokens=100000000")


def bot(stack: ExitStack, name: str, *, notes: bool = False) -> tuple[Any, TimedLLM, TimedChannel]:
    """A standard bot (taking notes if `notes`): "none" and "floor" without usage recording, "usage" as shipped,
    "budgets" with limits."""
    from agentloop.adapters import open_note_taking

    llm = TimedLLM()
    budgets = Budgets.parse(BUDGETS) if name == "budgets" else Budgets()
    options = StandardOptions(model="gpt-4o", budgets=budgets)  # a model with a price, as the usage it reports says
    directory = stack.enter_context(tempfile.TemporaryDirectory())
    channel = TimedChannel()
    pipeline = stack.enter_context(standard_pipeline(llm, channel, data_dir=directory, options=options))
    assert pipeline.stores is not None
    if notes:
        add_note_taking(pipeline, stack.enter_context(open_note_taking(pipeline.stores, llm)))
    if name in ("none", "floor"):
        pipeline.remove(UsageRecordingSystem)
    return pipeline.build(), llm, channel


async def turns(loop: Any, llm: TimedLLM, channel: TimedChannel, session: Session, count: int, into: Samples | None) -> None:
    """Run `count` turns, adding each one's framework time and its time until answered (ms) to `into`."""
    for _ in range(count):
        llm.seconds, channel.delivered_at = 0.0, 0.0
        started = perf_counter()
        await loop.run_turn(session, IncomingMessage(QUESTION))
        if into is not None:
            into["framework"].append((perf_counter() - started - llm.seconds) * 1000.0)
            if channel.delivered_at:  # a turn that sent nothing has no time until answered
                into["answered"].append((channel.delivered_at - started - llm.seconds) * 1000.0)


def rotated(names: tuple[str, ...], round_: int) -> tuple[str, ...]:
    """The order of round `round_`: `names` rotated by the round, so no bot always runs first."""
    shift = round_ % len(names)
    return names[shift:] + names[:shift]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--notes", action="store_true", help="the bots take notes too")
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    names = ("none", "usage", "budgets", "floor")
    times: dict[str, Samples] = {name: {"framework": [], "answered": []} for name in names}
    with ExitStack() as stack:
        bots = {name: bot(stack, name, notes=args.notes) for name in names}
        session = Session("bench", user_id="bench-user", org_id="acme")
        for loop, llm, channel in bots.values():
            asyncio.run(turns(loop, llm, channel, session, args.warmup, None))
        for round_ in range(args.rounds):
            for name in rotated(names, round_):
                loop, llm, channel = bots[name]
                asyncio.run(turns(loop, llm, channel, session, max(1, args.turns // args.rounds), times[name]))
    report(times, args)


def report(times: dict[str, Samples], args: argparse.Namespace) -> None:
    turn = "the standard turn with note-taking" if args.notes else "the standard turn"
    print(f"{turn}, {args.turns} turns each in {args.rounds} rounds of rotating order")
    for kind, title in (("framework", "framework time"), ("answered", "until the user is answered")):
        base = statistics.median(times["none"][kind])
        print(f"{title}:")
        print(f"  {'without usage recording':<44} {base:8.3f} ms")
        for name, label in (("usage", "with usage recording (as shipped)"), ("budgets", "with usage recording and two budgets")):
            median = statistics.median(times[name][kind])
            ratio = median / base
            print(f"  {label:<44} {median:8.3f} ms  {ratio:5.2f}x  <= {TARGET:.2f}x  {'ok' if ratio <= TARGET else 'MISSED'}")
        floor = statistics.median(times["floor"][kind])
        print(f"  {'noise floor: a second bot without it':<44} {floor:8.3f} ms  {floor / base:5.2f}x")


if __name__ == "__main__":
    main()
