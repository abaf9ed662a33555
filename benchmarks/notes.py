"""Note-taking benchmarks, printed next to their targets.

    python benchmarks/notes.py              # 100,000 notes of dim 384 (builds the index: minutes)
    python benchmarks/notes.py --notes 20000

- capture: the cost of `TrajectoryRecorder.enqueue` on the tool's path (target <= 5 us), and
  what capture adds to a trivial tool call end to end (target <= 2 us): the tool loop with
  note-taking's capture hook and its background writer against the same loop without, in
  alternating rounds of one run (every call written: sampling is off), and the CPU it adds
  per call on each thread (the loop's, the writer's, the store's), where Linux's /proc says
- batch writes: events per second into SQLite, at the default batch size and through the
  background writer (target >= 100,000 events/s)
- retrieval at N notes, 90% of them in the caller's tenant chain: p50 of a scoped
  repository search and recall@10 against exact search (targets <= 2 ms p50, >= 0.95),
  on embedding-like vectors and on hashed random texts (the worst case); and the p50 of
  a full `retrieve` (embedding, search, ranking, tracking)
"""

from __future__ import annotations

import asyncio
import argparse
import os
import random
import statistics
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import numpy as np

from agentloop import ChatMessage, LlmReply, LlmRequest, PromptContext, SanitizedInput, Scope, Session, ToolCall, ToolExecution, tool
from agentloop.adapters import open_stores
from agentloop.adapters.embedders.hashing import HashingEmbedder
from agentloop.adapters.notes import open_note_taking
from agentloop.logging import configure_logging
from agentloop.notes import (
    RETRIEVABLE,
    CaptureSettings,
    KnowledgeBase,
    KnowledgeItem,
    Layer,
    LayerIds,
    NoteType,
    TrajectoryRecorder,
)
from agentloop.ports.clock import SystemClock
from agentloop.testing import ScriptedLLM, make_context, run_system
from agentloop.testing.notes import make_execution
from systems import ToolLoopSettings, ToolLoopSystem
from retrieval import wait_for_index  # benchmarks/ is on sys.path when run as a script
from vector_index import low_rank


def _row(name: str, measured: str, target: str) -> None:
    print(f"{name:<52} {measured:>16}   target {target}")


def bench_enqueue(events: int) -> None:
    executions = [make_execution("search", session_id=f"s{i % 1000}") for i in range(events)]
    with tempfile.TemporaryDirectory() as directory, open_stores(directory, bot="t") as first, open_stores(
        directory, bot="t2"
    ) as second:
        recorder = TrajectoryRecorder(first.trajectories)
        enqueue = recorder.enqueue
        started = time.perf_counter()
        for execution in executions:
            enqueue(execution)
        per_event = (time.perf_counter() - started) / events * 1e6
        _row("capture: enqueue per event (1,000 sessions)", f"{per_event:.2f} us", "<= 5 us")
        busy = [make_execution("poll", session_id="busy") for _ in range(events)]
        sampling = TrajectoryRecorder(second.trajectories, rng=random.Random(0))
        started = time.perf_counter()
        for execution in busy:
            sampling.enqueue(execution)
        per_event = (time.perf_counter() - started) / events * 1e6
        _row("capture: enqueue per event (sampling active)", f"{per_event:.2f} us", "<= 5 us")


CALLS_PER_STEP = 16


@tool
def noop() -> str:
    """Do nothing: a tool call whose cost is the tool loop's own."""
    return "ok"


def _calls_then_answer(request: LlmRequest) -> LlmReply:
    """Ask for `CALLS_PER_STEP` calls of `noop` at once, then answer once they ran."""
    if request.messages[-1].role.value == "user":
        return LlmReply(content=None, tool_calls=tuple(ToolCall(f"c{i}", "noop", {}) for i in range(CALLS_PER_STEP)))
    return LlmReply(content="done")


def bench_tool_path(turns: int, rounds: int) -> None:
    """Per tool call: the tool loop without capture, and what note-taking's capture (the
    hook and its background writer, which competes for the GIL) adds, alternating rounds."""
    session = Session("bench", user_id="u1")
    clock = SystemClock()  # each execution starts at its own time, as in a bot (a fake clock stands still)

    async def per_call_us(system: ToolLoopSystem) -> tuple[float, float]:
        """Wall time and CPU time of every thread of the process, per tool call."""
        started, cpu = time.perf_counter(), time.process_time()
        for _ in range(turns):
            ctx = make_context(
                session=session, components=[PromptContext("", (ChatMessage.user("go"),)), SanitizedInput("go")], clock=clock
            )
            await run_system(system, ctx)
        calls = turns * CALLS_PER_STEP
        return (time.perf_counter() - started) / calls * 1e6, (time.process_time() - cpu) / calls * 1e6

    with tempfile.TemporaryDirectory() as directory, open_stores(directory, bot="t") as stores:
        note_taking = open_note_taking(
            stores, ScriptedLLM(), capture=CaptureSettings(sampling_threshold_per_minute=10**9)
        )
        settings = ToolLoopSettings(max_tool_executions=CALLS_PER_STEP, voice=False)
        plain = ToolLoopSystem(ScriptedLLM(_calls_then_answer), [noop], settings)
        captured = ToolLoopSystem(
            ScriptedLLM(_calls_then_answer), [noop], attrs.evolve(settings, on_tool_execution=note_taking.capture)
        )

        by_thread = {"plain": Counter[str](), "captured": Counter[str]()}

        async def timed(system: ToolLoopSystem, label: str) -> tuple[float, float]:
            before = _thread_cpu_s()
            figures = await per_call_us(system)
            by_thread[label].update(_thread_cpu_s())
            by_thread[label].subtract(before)
            return figures

        async def alternate() -> tuple[list[float], list[float], list[float]]:
            without: list[float] = []
            added: list[float] = []
            added_cpu: list[float] = []
            for _ in range(rounds):
                base, base_cpu = await timed(plain, "plain")
                wall, cpu = await timed(captured, "captured")
                without.append(base)
                added.append(wall - base)
                added_cpu.append(cpu - base_cpu)
            return without, added, added_cpu

        with note_taking:
            asyncio.run(per_call_us(captured))  # warm-up: the first batches, the store's pages
            without, added, added_cpu = asyncio.run(alternate())
        _row("tool call through the tool loop, no capture (median)", f"{statistics.median(without):.2f} us", "-")
        _row("capture: added to a tool call end to end (median)", f"{statistics.median(added):.2f} us", "<= 2 us")
        _row("capture: CPU added per tool call, all threads", f"{statistics.median(added_cpu):.2f} us", "-")
        _capture_cpu_by_thread(by_thread["plain"], by_thread["captured"], rounds * turns * CALLS_PER_STEP / 1e6)


def _capture_cpu_by_thread(plain_cpu: Counter[str], captured_cpu: Counter[str], calls: float) -> None:
    """The CPU capture adds per tool call on each thread: the loop's, the trajectory writer's, the store's."""
    stores_cpu = sum(used for name, used in captured_cpu.items() if name.startswith("agentloop-"))  # StoreThread's names
    for label, used in (
        ("the loop's thread, added", captured_cpu["MainThread"] - plain_cpu["MainThread"]),
        ("the writer thread", captured_cpu["trajectory-writer"]),
        ("the store's thread", stores_cpu),
    ):
        _row(f"capture: CPU per tool call, {label}", f"{used / calls:.2f} us" if captured_cpu else "no /proc", "-")


def _thread_cpu_s() -> dict[str, float]:
    """CPU seconds each running thread of this process has used, by thread name (Linux's
    /proc, in clock ticks; empty elsewhere)."""
    used: dict[str, float] = {}
    for thread in threading.enumerate():
        try:
            stat = Path(f"/proc/self/task/{thread.native_id}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        used[thread.name] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return used


def _executions(events: int) -> list[ToolExecution]:
    """`events` executions of 100 sessions taking turns, each starting 10 us after the last."""
    start = datetime.now(UTC)
    return [
        make_execution("search", session_id=f"s{i % 100}", arguments={"q": i}, started_at=start + timedelta(microseconds=10 * i))
        for i in range(events)
    ]


def bench_writes(events: int) -> None:
    executions = _executions(events)
    with tempfile.TemporaryDirectory() as directory, open_stores(directory, bot="t") as first, open_stores(
        directory, bot="t2"
    ) as second:
        store = first.trajectories

        batch = CaptureSettings().batch_size

        async def append_all() -> None:
            for start in range(0, events, batch):
                await store.append(executions[start : start + batch])

        started = time.perf_counter()
        asyncio.run(append_all())
        rate = events / (time.perf_counter() - started)
        _row(f"batch writes: store.append, batches of {batch}", f"{rate:,.0f} ev/s", ">= 100,000 events/s")

        fresh = _executions(events)
        recorder = TrajectoryRecorder(
            second.trajectories,
            settings=CaptureSettings(sampling_threshold_per_minute=10**9),
        )
        recorder.start()
        started = time.perf_counter()
        for execution in fresh:
            recorder.enqueue(execution)
        recorder.close()
        rate = events / (time.perf_counter() - started)
        _row("batch writes: background writer, enqueue to drained", f"{rate:,.0f} ev/s", ">= 100,000 events/s")


def _texts(count: int, rng: random.Random) -> list[str]:
    vocabulary = [f"w{i}" for i in range(3000)]
    return [" ".join(rng.choices(vocabulary, k=12)) for _ in range(count)]


def _retrieval_corpus(
    notes: int, queries: int, dim: int, corpus: str, embedder: HashingEmbedder
) -> tuple[list[str], np.ndarray, list[str], np.ndarray]:
    """The notes' texts and vectors, and the queries' texts (none for `low-rank`) and vectors."""
    rng = random.Random(7)
    if corpus == "low-rank":
        matrix, query_vectors = low_rank(np.random.default_rng(7), notes, queries, dim)
        return [f"note {i}" for i in range(notes)], matrix, [], query_vectors
    texts = _texts(notes, rng)
    matrix = np.concatenate([embedder.embed(texts[i : i + 5000]) for i in range(0, notes, 5000)])
    query_texts = _texts(queries, rng)
    return texts, matrix, query_texts, embedder.embed(query_texts)


def _recalls_at_10(matrix: np.ndarray, visible: np.ndarray, query_vectors: np.ndarray, found: list[set[int]]) -> list[float]:
    """Per query, the share of the exact ten nearest visible notes the index found."""
    recalls = []
    for vector, ids in zip(query_vectors, found, strict=True):
        scores = np.where(visible, matrix @ vector, -np.inf)
        exact = set((np.argpartition(-scores, 10)[:10] + 1).tolist())
        recalls.append(len(ids & exact) / 10)
    return recalls


def bench_retrieval(notes: int, queries: int, dim: int, corpus: str) -> None:
    """`low-rank`: embedding-like vectors (intrinsic dimension far below `dim`, as
    sentence embeddings are); `hashed-text`: HashingEmbedder rows of random 12-word
    texts, close to i.i.d. random vectors and so the worst case for a graph index."""
    embedder = HashingEmbedder(dim)
    caller = LayerIds("default", "o1", "t1", "p1")
    other = LayerIds("default", "o2", "t9", "p9")
    at = datetime(2026, 1, 1, tzinfo=UTC)
    texts, matrix, query_texts, query_vectors = _retrieval_corpus(notes, queries, dim, corpus, embedder)
    visible = np.arange(notes) % 10 != 0
    with tempfile.TemporaryDirectory() as directory, open_stores(directory, embedder=embedder) as stores:
        repository = stores.knowledge
        started = time.perf_counter()
        for start in range(0, notes, 5000):
            asyncio.run(repository.add_many([
                KnowledgeItem(NoteType.PATTERN, Layer.PROJECT, caller if visible[i] else other, texts[i][:20], texts[i], matrix[i], at)
                for i in range(start, min(start + 5000, notes))
            ]))
        build_s = time.perf_counter() - started
        label = f"{notes:,} {corpus}"
        _row(f"retrieval: build {label} notes (dim {dim})", f"{build_s:.1f} s", "-")
        started = time.perf_counter()
        if wait_for_index(repository):  # searches are exact until then: time the steady state
            _row(f"retrieval: then its graph built, {label}", f"{time.perf_counter() - started:.1f} s", "-")

        latencies: list[float] = []
        found: list[set[int]] = []

        async def search_all() -> None:  # one event loop for every query, as a bot has
            for vector in query_vectors:
                t0 = time.perf_counter()
                hits = await repository.search(vector, 10, caller=caller, layer=Layer.PROJECT, statuses=RETRIEVABLE, min_similarity=-1.0)
                latencies.append((time.perf_counter() - t0) * 1000.0)
                found.append({item.key for item, _ in hits})

        asyncio.run(search_all())
        # Exact search runs afterwards: a 100,000 x 384 product between queries would evict
        # the index from the CPU caches and time that instead.
        recalls = _recalls_at_10(matrix, visible, query_vectors, found)
        _row(f"retrieval: search p50, {label}, 90% visible", f"{statistics.median(latencies):.3f} ms", "<= 2 ms")
        _row(f"retrieval: recall@10 vs exact, {label}", f"{statistics.mean(recalls):.3f}", ">= 0.95")

        if query_texts:
            knowledge = KnowledgeBase(repository, embedder)
            full: list[float] = []

            async def retrieve_all() -> None:
                for text in query_texts:
                    t0 = time.perf_counter()
                    await knowledge.retrieve(text, caller, session=Scope(session_id="bench"), k=5, min_similarity=0.0)
                    full.append((time.perf_counter() - t0) * 1000.0)

            asyncio.run(retrieve_all())
            _row(f"retrieval: KnowledgeBase.retrieve p50, {label}", f"{statistics.median(full):.3f} ms", "-")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notes", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--corpus", choices=["low-rank", "hashed-text", "both"], default="both")
    parser.add_argument("--tool-turns", type=int, default=300, help="turns of 16 tool calls per round of the tool-path figure")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    bench_enqueue(args.events)
    bench_tool_path(args.tool_turns, args.rounds)
    bench_writes(args.events // 4)
    for corpus in ("low-rank", "hashed-text") if args.corpus == "both" else (args.corpus,):
        bench_retrieval(args.notes, args.queries, args.dim, corpus)


if __name__ == "__main__":
    main()
