"""Turns per second through the durable inbox with 1, 2 and 4 worker processes, next to
one process running the same turns on SQLite with no inbox.

Each level submits `--sessions` sessions x `--messages` messages to a fresh PostgreSQL
database, starts that many `agentloop worker` processes (each `--concurrency` turns at
once) and counts the turns finished from the moment every worker is ready until the
last one, by the database's clock (so a worker's start-up is not counted; a run too
small for that is timed from its first turn). The bot is the standard pipeline with a model that awaits
`--model-delay` seconds and a channel that sends nowhere. The stores are PostgreSQL when
this release opens postgresql:// stores, else one SQLite data directory shared by the
workers (the line above the table says which). The target is 1.6x the turns/s from 1
to 2 workers at saturation; on a 2-core machine PostgreSQL and the workers share the cores.

Then retrieval: `--notes` notes (HashingEmbedder vectors of dim 384 of generated texts)
owned by 100 tenants, 1% each, loaded with the knowledge repository's `add_many`, and
`--queries` searches through `KnowledgeBase.search` by one tenant: p50 and p95 on
PostgreSQL with pgvector beside SQLite with hnswlib.

With `--baseline REV` the worker levels are run on REV's code too, in the same run: git
extracts REV's `agentloop`, `systems` and `benchmarks` into a temporary directory, each
level's messages are submitted and its workers run by that code base's own benchmark, and
the two code bases take turns level by level for `--rounds` rounds, so noise on the machine
hits both; the table gives each one's median turns/s and the ratio this / REV.

    python benchmarks/workers.py [--url postgresql://...] [--workers 1,2,4] [--sessions 200]
                                 [--messages 5] [--concurrency 50] [--model-delay 0.05]
                                 [--notes 100000] [--queries 60] [--baseline REV] [--rounds 1]

Without `--url` a temporary PostgreSQL is started with pgserver (the test extra).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import psycopg

from agentloop import IncomingMessage, LlmReply, LlmRequest, Session
from agentloop.adapters import HashingEmbedder, open_stores
from agentloop.ports import Stores
from agentloop.adapters.errors import StoreUrlError
from agentloop.logging import configure_logging
from agentloop.notes import KnowledgeBase, KnowledgeItem, Layer, LayerIds, NoteType
from agentloop.testing import ScriptedLLM
from agentloop.workers import open_inbox
from systems import StandardPipeline, standard_pipeline

HERE = Path(__file__).resolve().parent
PREPARE = """
import asyncio, sys
from pathlib import Path
import workers
stores, label = workers.stores_for(sys.argv[1], Path(sys.argv[2]))
asyncio.run(workers.submit(sys.argv[1], int(sys.argv[3]), int(sys.argv[4])))
print(stores)
print(label)
"""
"""A level's set-up, run by the benchmark of the code base it measures: its stores (created by
that code) and its messages (submitted into that code's inbox schema); prints the stores URL and label."""
TARGET_SPEEDUP = 1.6
TENANTS = 100
LOAD_BATCH = 5000


class NowhereChannel:
    """Sends nothing: the benchmark times turns, not a transport."""

    async def send_text(self, session: Session, text: str, hints: dict[str, str]) -> None: ...

    async def send_voice(self, session: Session, text: str) -> None: ...

    async def send_attachment(self, session: Session, attachment: Any) -> None: ...


def reply(request: LlmRequest) -> LlmReply:
    return LlmReply(f"noted: {request.messages[-1].content}", model="bench")


def factory(stores: Stores) -> StandardPipeline:
    """The workers' pipeline (`--pipeline workers:factory`, run from this directory)."""
    llm = ScriptedLLM(reply, latency=float(os.environ.get("AGENTLOOP_BENCH_MODEL_DELAY", "0.05")))
    return standard_pipeline(llm, NowhereChannel(), stores=stores)


def session(number: int) -> Session:
    return Session(f"s{number}", user_id=f"u{number}", project_id=f"p{number % 10}")


@contextmanager
def postgres(url: str | None) -> Iterator[str]:
    """`url`, or a temporary server's when none is given."""
    if url is not None:
        yield url
        return
    import pgserver

    server = pgserver.get_server(tempfile.mkdtemp(prefix="agentloop-bench-pg-"), cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


def fresh_database(url: str) -> str:
    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    base, _, query = url.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")


def stores_for(database: str, scratch: Path) -> tuple[str, str]:
    """The stores URL for a level and its label: PostgreSQL when this release opens it."""
    try:
        open_stores(database, bot="bench").close()
    except StoreUrlError:
        return str(scratch / f"data-{uuid.uuid4().hex[:8]}"), "SQLite (one data directory shared by the workers)"
    return database, "PostgreSQL"


async def submit(url: str, sessions: int, messages: int) -> None:
    async with open_inbox(url, bot="bench", pool_size=4) as inbox:
        for message in range(messages):
            for number in range(sessions):
                await inbox.submit(session(number), IncomingMessage(f"message {message} of session {number}"))


def run_level(database: str, scratch: Path, workers: int, args: argparse.Namespace, code: Path = HERE.parent) -> tuple[float, str]:
    """Turns per second of `workers` worker processes over every submitted message, on the code
    base at `code` (its agentloop, systems and benchmarks), and the label of the stores it used."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")])),
        "AGENTLOOP_BENCH_MODEL_DELAY": str(args.model_delay),
    }
    try:
        prepared = subprocess.run(
            [sys.executable, "-c", PREPARE, database, str(scratch), str(args.sessions), str(args.messages)],
            cwd=code / "benchmarks", env=env, capture_output=True, text=True, check=True,
        ).stdout.splitlines()
    except subprocess.CalledProcessError as error:
        raise SystemExit(f"setting up the level on the code at {code} failed:\n{error.stderr}") from None
    stores, label = prepared[-2:]
    command = [
        sys.executable, "-m", "agentloop.cli", "worker", "--stores", stores, "--inbox", database, "--bot", "bench",
        "--pipeline", "workers:factory", "--concurrency", str(args.concurrency),
    ]
    processes = [
        subprocess.Popen(command, cwd=code / "benchmarks", env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for _ in range(workers)
    ]
    try:
        for process in processes:  # each prints its status line once it takes turns
            assert process.stdout is not None
            if not process.stdout.readline():
                raise SystemExit(f"a worker exited before it started, status {process.wait()}")
        with psycopg.connect(database, autocommit=True) as conn:
            ready = conn.execute("SELECT now()").fetchone()
            assert ready is not None
            while True:
                row = conn.execute(
                    "SELECT count(*) FILTER (WHERE finished_at IS NULL), count(*) FILTER (WHERE finished_at > %s), "
                    "extract(epoch FROM max(finished_at) - %s), count(*), "
                    "extract(epoch FROM max(finished_at) - min(started_at)) FROM agentloop_inbox",
                    (ready[0], ready[0]),
                ).fetchone()
                assert row is not None
                unfinished, after_ready, seconds_after_ready, every, seconds = row
                if unfinished == 0:  # a run too small to outlast the start-up is timed whole
                    return float(after_ready / seconds_after_ready if after_ready * 2 >= every else every / seconds), label
                if any(p.poll() is not None for p in processes):
                    raise SystemExit(f"a worker exited early with status {[p.poll() for p in processes]}")
                time.sleep(0.1)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait()


async def single_process(data: Path, args: argparse.Namespace) -> float:
    """Turns per second of one process running every session concurrently on SQLite, no inbox."""
    llm = ScriptedLLM(reply, latency=args.model_delay)
    with open_stores(data, bot="bench") as stores, standard_pipeline(llm, NowhereChannel(), stores=stores) as pipeline:
        loop = pipeline.build()
        limit = asyncio.Semaphore(args.concurrency)

        async def converse(number: int) -> None:
            for message in range(args.messages):
                async with limit:
                    await loop.run_turn(session(number), IncomingMessage(f"message {message} of session {number}"))

        started = time.perf_counter()
        await asyncio.gather(*(converse(number) for number in range(args.sessions)))
        return args.sessions * args.messages / (time.perf_counter() - started)


def levels(
    server: str, scratch: Path, counts: Sequence[int], codes: dict[str, Path], args: argparse.Namespace
) -> tuple[dict[str, dict[int, list[float]]], dict[str, str]]:
    """Turns/s of each code base at each worker count, each on a fresh database, the code bases
    taking turns level by level for `args.rounds` rounds; and the stores each one used."""
    measured: dict[str, dict[int, list[float]]] = {name: {workers: [] for workers in counts} for name in codes}
    labels: dict[str, str] = {}
    for _ in range(max(1, args.rounds)):
        for workers in counts:
            for name, code in codes.items():
                rate, labels[name] = run_level(fresh_database(server), scratch, workers, args, code)
                measured[name][workers].append(rate)
    return measured, labels


def tenant(number: int) -> LayerIds:
    return LayerIds("default", f"o{number}", f"t{number}", f"p{number}")


def texts(count: int, rng: random.Random) -> list[str]:
    """Random 12-word texts over a 3,000-word vocabulary."""
    vocabulary = [f"w{i}" for i in range(3000)]
    return [" ".join(rng.choices(vocabulary, k=12)) for _ in range(count)]


async def retrieval(url: str, notes: int, queries: Sequence[str]) -> tuple[float, float, float]:
    """Seconds to load `notes` notes into the stores at `url` (tenant `i % TENANTS` owns note i)
    and the p50 and p95 in ms of `KnowledgeBase.search` by tenant 0 over `queries`."""
    embedder = HashingEmbedder(384)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    rng = random.Random(7)
    with open_stores(url, bot="retrieval", embedder=embedder) as stores:
        started = time.perf_counter()
        for start in range(0, notes, LOAD_BATCH):
            batch = texts(min(LOAD_BATCH, notes - start), rng)
            vectors = await embedder.aembed(batch)
            await stores.knowledge.add_many([
                KnowledgeItem(NoteType.PATTERN, Layer.PROJECT, tenant((start + i) % TENANTS), text[:20], text, vector, at)
                for i, (text, vector) in enumerate(zip(batch, vectors, strict=True))
            ])
        loaded = time.perf_counter() - started
        knowledge = KnowledgeBase(stores.knowledge, embedder)
        latencies = []
        for query in queries:
            started = time.perf_counter()
            await knowledge.search(query, tenant(0), min_similarity=0.0)
            latencies.append((time.perf_counter() - started) * 1000.0)
    return loaded, statistics.median(latencies), statistics.quantiles(latencies, n=20)[-1]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a PostgreSQL server to create the benchmark's databases on")
    parser.add_argument("--workers", default="1,2,4", help="worker process counts, comma-separated")
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--messages", type=int, default=5, help="messages per session")
    parser.add_argument("--concurrency", type=int, default=50, help="turns one worker runs at once")
    parser.add_argument("--model-delay", type=float, default=0.05)
    parser.add_argument("--notes", type=int, default=100_000, help="notes in the retrieval benchmark")
    parser.add_argument("--queries", type=int, default=60, help="searches per backend in the retrieval benchmark")
    parser.add_argument("--baseline", default="none", help="a git revision whose code runs the worker levels too, alternating (default none)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the worker levels; each code base's median is shown")
    args = parser.parse_args(argv)
    configure_logging("ERROR")
    counts = [int(n) for n in args.workers.split(",")]
    with postgres(args.url) as server, tempfile.TemporaryDirectory(prefix="agentloop-bench-") as scratch, ExitStack() as stack:
        codes = {"this": HERE.parent}
        if args.baseline not in ("none", "this"):
            from turn_latency import baseline_checkout

            baseline = stack.enter_context(baseline_checkout(args.baseline, ("agentloop", "systems", "benchmarks")))
            if isinstance(baseline, str):
                raise SystemExit(baseline)
            codes[args.baseline] = baseline
        measured, labels = levels(server, Path(scratch), counts, codes, args)
        rates = {workers: statistics.median(runs) for workers, runs in measured["this"].items()}
        label = labels["this"]
        alone = asyncio.run(single_process(Path(scratch) / "single", args))
        queries = texts(args.queries, random.Random(11))
        searched = {
            "PostgreSQL + pgvector (HNSW)": asyncio.run(retrieval(fresh_database(server), args.notes, queries)),
            "SQLite + hnswlib": asyncio.run(retrieval(str(Path(scratch) / "retrieval"), args.notes, queries)),
        }
    turns = args.sessions * args.messages
    print(f"{turns} turns ({args.sessions} sessions x {args.messages}), model awaits {args.model_delay * 1000:.0f} ms, "
          f"{args.concurrency} turns at once per process; stores: {label}")
    print(f"{'setup':<40} {'turns/s':>9}  {'vs 1 worker':>11}  target")
    for workers, rate in rates.items():
        ratio = f"{rate / rates[counts[0]]:.2f}x" if counts[0] == 1 else "-"
        target = ""
        if workers == 2 and 1 in rates:
            verdict = "ok" if rate / rates[1] >= TARGET_SPEEDUP else "MISSED"
            target = f">= {TARGET_SPEEDUP}x  {verdict}"
        print(f"{f'{workers} worker process(es), PostgreSQL inbox':<40} {rate:>9.1f}  {ratio:>11}  {target}".rstrip())
    print(f"{'1 process, SQLite, no inbox':<40} {alone:>9.1f}")
    if args.baseline != "none":
        print()
        print(f"this checkout beside {args.baseline} (stores: {labels[args.baseline]}), levels alternating in "
              f"{max(1, args.rounds)} round(s), median turns/s")
        print(f"{'setup':<40} {'this':>9}  {args.baseline:>11}  this / {args.baseline}")
        for workers in counts:
            ours, theirs = rates[workers], statistics.median(measured[args.baseline][workers])
            runs = ", ".join(f"{a:.0f}/{b:.0f}" for a, b in zip(measured["this"][workers], measured[args.baseline][workers], strict=True))
            print(f"{f'{workers} worker process(es), PostgreSQL inbox':<40} {ours:>9.1f}  {theirs:>11.1f}  {ours / theirs:.2f}x  ({runs})")
    print()
    print(f"retrieval at {args.notes:,} notes of dim 384, {TENANTS} tenants of 1% each: "
          f"{args.queries} KnowledgeBase.search calls (k=5) by one tenant")
    print(f"{'stores':<40} {'load s':>9}  {'p50':>11}  {'p95':>11}")
    for label, (loaded, p50, p95) in searched.items():
        print(f"{label:<40} {loaded:>9.1f}  {p50:>8.2f} ms  {p95:>8.2f} ms")


if __name__ == "__main__":
    main()
