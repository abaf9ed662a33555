"""Flat cost: a turn should cost the same at turn 5,000 of a session as at turn 100, and
with a million stored rows as with a thousand.

The turn is the standard pipeline with note-taking on SQLite (an instant model). Two
measurements, each in alternating rounds within one run so the machine's noise hits both:

- session length (time and prompt size in tokens, with a small context window so compaction
  runs all along): two bots, each with one session of one user, who first had an earlier
  session of a few turns (which memory recalls past all of the current session's own
  rows); one session is first brought to `--session-turns` turns, the other is timed
  around its turn 100; each round times a few turns of each;
- store size: two bots, one whose file holds `--small` history and memory rows of other
  users, one with `--rows` (inserted straight through SQL, spread over 1,000 users of one
  shared project), timed for a new user with few rows and for a new session in the
  shared project.

    python benchmarks/turn_flat.py [--session-turns 5000] [--rows 1000000] [--small 1000] [--rounds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from time import perf_counter

from agentloop import ContextBudget, EstimatedTokens, IncomingMessage, LlmReply, LlmRequest, Session, history_scope, memory_scope
from agentloop.compaction import SUMMARY_INSTRUCTIONS
from agentloop.tokens import request_tokens
from agentloop.adapters import open_note_taking, open_stores
from agentloop.adapters._rows import SCOPE_COLUMNS, scope_values
from agentloop.logging import configure_logging
from agentloop.testing import RecordingChannel
from systems import standard_pipeline
from systems.standard import StandardOptions
from systems.notes import add_note_taking

TARGET_X = 1.2
QUESTION = "What time does the office open on Mondays?"
OTHER_USERS = 1000
PROJECT = "shared-project"
EARLIER_TURNS = 5
BUDGET = ContextBudget(window=1_500, answer_reserve=300)
"""A small window, so history outgrows it within the first hundred turns and compaction runs all along."""


class InstantLLM:
    """Answers at once, a distinct text each call; keeps each turn's prompt size in tokens (as the
    pipeline's counter counts them) and writes a short summary when compaction asks for one."""

    def __init__(self) -> None:
        self.calls = 0
        self.counter = EstimatedTokens()
        self.prompt_tokens: list[int] = []

    async def complete(self, request: LlmRequest) -> LlmReply:
        self.calls += 1
        if request.messages[0].content == SUMMARY_INSTRUCTIONS:
            return LlmReply("The user keeps asking when the office opens on Mondays: at eight.", model="bench")
        self.prompt_tokens.append(request_tokens(self.counter, request.messages, request.tools))
        return LlmReply(f"The office opens at eight on Mondays ({self.calls}).", model="bench")


class Bot:
    """The standard pipeline with note-taking on the SQLite stores in `directory`."""

    def __init__(self, directory: Path, stack: ExitStack) -> None:
        self.llm = llm = InstantLLM()
        self.channel = RecordingChannel()
        stores = stack.enter_context(open_stores(directory))
        options = StandardOptions(context_budget=BUDGET, token_counter=llm.counter)
        pipeline = stack.enter_context(standard_pipeline(llm, self.channel, stores=stores, options=options))
        add_note_taking(pipeline, stack.enter_context(open_note_taking(stores, llm)))
        self.loop = pipeline.build()

    async def turns(self, session: Session, count: int) -> list[float]:
        """Run `count` turns of `session`; their times in ms."""
        times = []
        for _ in range(count):
            t0 = perf_counter()
            await self.loop.run_turn(session, IncomingMessage(QUESTION))
            times.append((perf_counter() - t0) * 1000.0)
            self.channel.sent.clear()
        return times


def bulk_rows(directory: Path, rows: int) -> None:
    """Give the bot in `directory` `rows` history and `rows` memory rows of other users (one
    shared project), through SQL: a million take seconds, not a million turns."""
    with ExitStack() as stack:
        stack.enter_context(open_stores(directory))  # creates the tables
    sessions = [Session(f"other-s{u}", user_id=f"other-u{u}", project_id=PROJECT) for u in range(OTHER_USERS)]
    history = [scope_values(history_scope(s)) for s in sessions]
    memory = [(*scope_values(memory_scope(s)), s.id) for s in sessions]
    columns = ", ".join(SCOPE_COLUMNS)
    conn = sqlite3.connect(directory / "bot.sqlite3")
    try:
        with conn:
            conn.executemany(
                f"INSERT INTO session_messages ({columns}, role, content) VALUES (?, ?, ?, ?, ?, ?, 'user', ?)",
                ((*history[i % OTHER_USERS], QUESTION) for i in range(rows)),
            )
            conn.executemany(
                f"INSERT INTO memory_entries ({columns}, session_id, user_text, assistant_text, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'The office opens at eight.', '2026-01-01T00:00:00+00:00')",
                ((*memory[i % OTHER_USERS], QUESTION) for i in range(rows)),
            )
    finally:
        conn.close()


def ratio_row(label: str, small: list[float], big: list[float], small_name: str, big_name: str) -> str:
    a, b = statistics.median(small), statistics.median(big)
    verdict = "ok" if b / a <= TARGET_X else "MISSED"
    return f"{label:<44} {small_name} {a:.3f} ms  {big_name} {b:.3f} ms  {b / a:.2f}x  <= {TARGET_X:g}x  {verdict}"


async def session_length(
    directory: Path, long_turns: int, rounds: int, per_round: int
) -> tuple[tuple[list[float], list[float]], tuple[list[int], list[int]]]:
    """Per-turn times and prompt sizes (tokens) of a session around its turn 100 and of one past
    `long_turns`, each on a bot of its own."""
    with ExitStack() as stack:
        bots = Bot(directory / "short", stack), Bot(directory / "long", stack)
        sessions = Session("short", user_id="ada"), Session("long", user_id="ada")
        for bot in bots:
            await bot.turns(Session("earlier", user_id="ada"), EARLIER_TURNS)
        await bots[1].turns(sessions[1], long_turns)
        await bots[0].turns(sessions[0], max(0, 100 - rounds * per_round // 2))
        sent = [len(bot.llm.prompt_tokens) for bot in bots]
        times: tuple[list[float], list[float]] = ([], [])
        for _ in range(rounds):
            for bot, session, samples in zip(bots, sessions, times):
                samples += await bot.turns(session, per_round)
        return times, (bots[0].llm.prompt_tokens[sent[0]:], bots[1].llm.prompt_tokens[sent[1]:])


async def store_size(
    small_dir: Path, big_dir: Path, rounds: int, per_round: int
) -> dict[str, tuple[list[float], list[float]]]:
    """Per-turn times on the small and the big bot, for a new user and for the shared project."""
    cases = {
        "a user with few rows": Session("few-s", user_id="few-user"),
        "a session in the shared project": Session("project-s", user_id="member", project_id=PROJECT),
    }
    with ExitStack() as stack:
        small, big = Bot(small_dir, stack), Bot(big_dir, stack)
        times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in cases}
        for session in cases.values():
            await small.turns(session, per_round)
            await big.turns(session, per_round)
        for _ in range(rounds):
            for name, session in cases.items():
                times[name][0].extend(await small.turns(session, per_round))
                times[name][1].extend(await big.turns(session, per_round))
        return times


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--session-turns", type=int, default=5000, help="turns of the long session")
    parser.add_argument("--rows", type=int, default=1_000_000, help="history and memory rows of the big bot")
    parser.add_argument("--small", type=int, default=1000, help="history and memory rows of the small bot")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=20, help="turns per session per round")
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    with tempfile.TemporaryDirectory() as root:
        length_dir, small_dir, big_dir = (Path(root) / name for name in ("length", "small", "big"))
        (early, late), (early_tokens, late_tokens) = asyncio.run(
            session_length(length_dir, args.session_turns, args.rounds, args.per_round)
        )
        t0 = perf_counter()
        bulk_rows(small_dir, args.small)
        bulk_rows(big_dir, args.rows)
        built = perf_counter() - t0
        sizes = asyncio.run(store_size(small_dir, big_dir, args.rounds, args.per_round))
    print(f"flat cost: the standard turn with note-taking on SQLite, medians of {args.rounds} alternating rounds "
          f"of {args.per_round} turns")
    print(ratio_row("per-turn time by session length", early, late, "turn ~100", f"turn {args.session_turns}+"))
    print(f"{'prompt size by session length (tokens)':<44} turn ~100 median {statistics.median(early_tokens):.0f} "
          f"max {max(early_tokens)}  turn {args.session_turns}+ median {statistics.median(late_tokens):.0f} "
          f"max {max(late_tokens)}  budget {BUDGET.prompt}  "
          f"{'ok' if max(late_tokens) <= BUDGET.prompt else 'MISSED'}")
    print(f"store size: {args.small:,} vs {args.rows:,} history and memory rows of {OTHER_USERS:,} other users "
          f"(inserted in {built:.1f} s)")
    for name, (small, big) in sizes.items():
        print(ratio_row(f"per-turn time, {name}", small, big, f"{args.small:,} rows", f"{args.rows:,} rows"))


if __name__ == "__main__":
    main()
