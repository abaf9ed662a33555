"""What a prune gives back on the SQLite backend: the bot's file size and its read times before
and after, as ratios (nothing is asserted; the figures depend on the machine).

    python benchmarks/prune.py                       # 2,000 sessions of 10 turns, 20,000 RAG texts
    python benchmarks/prune.py --sessions 200 --texts 2000

- retention: histories of `--turns` turns with one usage row a turn spread over `--days` days,
  pruned to 2 turns a history and usage rolled up after 7 days; the file size and a usage
  report's time before and after
- compaction: `--texts` RAG texts of which half (every other tenant's) are deleted as an
  erase deletes them; the file size and a hybrid search's time right after the deletes and
  after `prune_stores(..., vectors=True)` compacted the file, its keyword index and its vector index
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agentloop import ChatMessage, Scope
from agentloop.adapters import open_stores
from agentloop.adapters.embedders.hashing import HashingEmbedder
from agentloop.adapters.retention import prune_stores
from agentloop.adapters.sqlite.retention import size_of
from agentloop.logging import configure_logging
from agentloop.messages import Usage
from agentloop.ports.stores import Stores
from agentloop.ports.usage import RecordedCall, UsageFilter, UsageGroup, UsageRecord
from agentloop.retention import Retention

WORDS = [f"w{n}" for n in range(5000)]
EMBEDDER = HashingEmbedder(dim=128)


def _median_ms(call: Callable[[], object], times: int) -> float:
    spent = []
    for _ in range(times):
        start = time.perf_counter()
        call()
        spent.append((time.perf_counter() - start) * 1000)
    return statistics.median(spent)


def _row(name: str, before: float, after: float, unit: str) -> None:
    shown = (lambda v: f"{v:,.0f}") if unit == "bytes" else (lambda v: f"{v:.2f} ms")
    print(f"{name:<36} {shown(before):>16} {shown(after):>16} {after / before if before else 0:>8.2f}x")


def _header(title: str) -> None:
    print(title)
    print(f"{'':<36} {'before':>16} {'after':>16} {'ratio':>9}")


async def _fill_history(stores: Stores, sessions: int, turns: int, days: int, now: datetime) -> None:
    for s in range(sessions):
        scope = Scope(f"c{s % 20}", user_id=f"u{s}", session_id=f"s{s}")
        for t in range(turns):
            text = " ".join(random.choices(WORDS, k=30))
            await stores.sessions.append(scope, [ChatMessage.user(text), ChatMessage.assistant(text)])
            at = now - timedelta(days=random.uniform(0, days))
            await stores.usage.record(UsageRecord(f"s{s}-t{t}", scope, at, (RecordedCall("m", Usage(500, 80), 0.01),)))


def retention(directory: Path, sessions: int, turns: int, days: int, queries: int) -> None:
    now = datetime.now(UTC)
    with open_stores(directory, embedder=EMBEDDER) as stores:
        asyncio.run(_fill_history(stores, sessions, turns, days, now))
    with open_stores(directory, embedder=EMBEDDER) as stores:
        report_before = _median_ms(lambda: asyncio.run(stores.usage.report(UsageFilter(), UsageGroup.DAY)), queries)
    before = size_of(directory, "bot")
    report = prune_stores(directory, retention=Retention(history_turns=2, usage_days=7), now=now)
    with open_stores(directory, embedder=EMBEDDER) as stores:
        report_after = _median_ms(lambda: asyncio.run(stores.usage.report(UsageFilter(), UsageGroup.DAY)), queries)
    _header(f"retention: {sessions} sessions x {turns} turns, usage over {days} days; history_turns=2, usage_days=7 ({report.line()})")
    _row("file bytes", before, size_of(directory, "bot"), "bytes")
    _row("usage report by day, p50", report_before, report_after, "ms")


def compaction(directory: Path, texts: int, queries: int) -> None:
    tenants = 20
    with open_stores(directory, embedder=EMBEDDER) as stores:
        for n in range(texts):
            asyncio.run(stores.rag.add(Scope(f"c{n % tenants}"), " ".join(random.choices(WORDS, k=40))))
    with closing(sqlite3.connect(directory / "bot.sqlite3")) as conn, conn:  # what an erase of half the tenants deletes
        conn.execute("DELETE FROM rag_documents WHERE CAST(substr(scope_company, 2) AS INTEGER) % 2 = 1")
    questions = [" ".join(random.choices(WORDS, k=3)) for _ in range(queries)]

    def search_ms() -> float:
        with open_stores(directory, embedder=EMBEDDER) as stores:
            asked = iter(questions * 2)
            return _median_ms(lambda: asyncio.run(stores.rag.search(Scope("c0"), next(asked), 5)), queries)

    search_before, before = search_ms(), size_of(directory, "bot")
    prune_stores(directory, retention=Retention(), vectors=True)
    search_after = search_ms()
    _header(f"compaction: {texts} RAG texts in {tenants} tenants, half deleted, then compacted (VACUUM, FTS5 optimize, vector index rebuilt)")
    _row("file bytes (with the vector index)", before, size_of(directory, "bot"), "bytes")
    _row("hybrid search of a tenant, p50", search_before, search_after, "ms")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--texts", type=int, default=20000)
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    random.seed(7)
    with tempfile.TemporaryDirectory() as scratch:
        retention(Path(scratch) / "retention", args.sessions, args.turns, args.days, args.queries)
        print()
        compaction(Path(scratch) / "compaction", args.texts, args.queries)


if __name__ == "__main__":
    main()
