"""Erasing one user among many: the time follows that user's rows, not everyone else's.

Run `python benchmarks/erase.py` (defaults: 10,000, 100,000 and 1,000,000 rows of other users
in one org of a SQLite bot, and a user with 1,000 then 10,000 rows). Each size is a fresh bot:
history messages, memory entries and usage calls of many users and sessions, written straight
into the tables (the stores' own writes would take the benchmark's whole time), then
`Stores.erase` of one user, timed. It prints each erase beside the first, as ratios, and asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from agentloop.adapters import HashingEmbedder, open_stores
from agentloop.adapters._rows import SCOPE_COLUMNS
from agentloop.logging import configure_logging
from agentloop.privacy import Subject

USERS_PER_SESSION = 1
MESSAGES_PER_SESSION = 20
_MARKS = ", ".join("?" * len(SCOPE_COLUMNS))


def fill(directory: Path, user: str, rows: int, first_session: int) -> None:
    """`rows` history messages of `user` (a session per `MESSAGES_PER_SESSION`), with a memory entry and
    a usage call per four messages, in org o1 of company acme."""
    sessions = max(1, rows // MESSAGES_PER_SESSION)
    with sqlite3.connect(directory / "bot.sqlite3") as conn:
        chains = [("acme", "o1", "t1", None, user, f"s{first_session + n}") for n in range(sessions)]
        conn.executemany(
            f"INSERT INTO session_messages ({', '.join(SCOPE_COLUMNS)}, role, content) VALUES ({_MARKS}, ?, ?)",
            ((*chains[n % sessions], "user", f"message {n} of {user}") for n in range(rows)),
        )
        conn.executemany(
            f"INSERT INTO memory_entries ({', '.join(SCOPE_COLUMNS)}, session_id, user_text, assistant_text, created_at) "
            f"VALUES ({_MARKS}, ?, ?, ?, ?)",
            (("acme", "o1", None, None, user, None, chains[n % sessions][5], f"said {n}", f"heard {n}", "2026-01-01T00:00:00+00:00")
             for n in range(rows // 4)),
        )
        conn.executemany(
            f"INSERT INTO usage_calls (turn_id, call_index, {', '.join(SCOPE_COLUMNS)}, at, day, model, input_tokens, "
            f"output_tokens, cache_read_tokens, cache_write_tokens, cost) VALUES (?, 0, {_MARKS}, ?, ?, 'm', 10, 1, 0, 0, 0.1)",
            ((f"turn-{user}-{n}", *chains[n % sessions], "2026-01-01T00:00:00+00:00", "2026-01-01") for n in range(rows // 4)),
        )


def erase_time(others: int, victim_rows: int, repeats: int = 3) -> tuple[float, int]:
    """The median seconds to erase a user of `victim_rows` messages from a bot holding `others` messages
    of other users (`repeats` such users erased one after another, after one of a single row), and the rows erased."""
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        open_stores(directory, embedder=HashingEmbedder(dim=64)).close()  # the schema
        users = max(1, others // 1000)
        for n in range(users):
            fill(directory, f"user{n}", others // users, first_session=n * 1000)
        fill(directory, "warmup", 1, first_session=10**9)
        for n in range(repeats):
            fill(directory, f"erased{n}", victim_rows, first_session=10**9 + (n + 1) * 10**6)
        times, total = [], 0
        with open_stores(directory, embedder=HashingEmbedder(dim=64)) as stores:
            for user in ["warmup", *(f"erased{n}" for n in range(repeats))]:
                start = time.perf_counter()
                erased = asyncio.run(stores.erase(Subject.user(user, company_id="acme", org_id="o1"), actor="benchmark"))
                times.append(time.perf_counter() - start)
                total = erased.total
        return statistics.median(times[1:]), total


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--others", default="10000,100000,1000000", help="rows of other users, comma-separated sizes")
    parser.add_argument("--victim-rows", default="1000,10000", help="rows of the erased user, comma-separated sizes")
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    sizes = [int(size) for size in args.others.split(",")]
    victims = [int(size) for size in args.victim_rows.split(",")]
    print(f"{'other rows':>12} {'user rows':>10} {'erased':>8} {'erase ms':>10} {'vs first':>9}")
    first: float | None = None
    for others, victim in [*((size, victims[0]) for size in sizes), *((sizes[-1], size) for size in victims[1:])]:
        seconds, erased = erase_time(others, victim)
        first = first or seconds
        print(f"{others:>12} {victim:>10} {erased:>8} {seconds * 1000:>10.1f} {seconds / first:>8.2f}x")
    print("flat down the first rows (others grow), growing with the user's rows in the last: the erase reads only the user's rows")


if __name__ == "__main__":
    main()
