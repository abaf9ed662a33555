"""How long a bot's turns stall the asyncio event loop, at 1, 50 and 200 concurrent sessions.

The bot is the standard pipeline with note-taking (retrieval, and capture with its
background writer started) on SQLite files in a temporary directory, and a model that
awaits 50 ms per call, as a remote model would. Every fourth turn the model asks for a
tool first, so capture runs too. Each session is a coroutine running its turns one
after another; sessions have their own user and project, so memory and RAG write on
every turn.

Beside the sessions a ticker sleeps 1 ms at a time and records how late each wake-up
is (actual wake time - expected wake time). Every store call the turns make (history,
memory, RAG, the note index) is timed as well, on the synchronous store that does the
work, wherever it ran: on its file's thread, or inline on the loop (reads of an idle
file, and writes while one session has the file to itself); a call marked "(loop)" is of
a store with no thread and always runs on the loop. The idle row is the ticker alone,
the floor the timer resolution and the machine's other load set.

With `--max-concurrent-turns N` the bot runs at most N turns at once (`AgentLoop`'s
bound); the other sessions' turns wait their turn, which keeps each pass of the loop short.

    python benchmarks/event_loop_lag.py [--sessions 1,50,200] [--turns N] [--model-delay 0.05] [--max-concurrent-turns N]

`--turns` is per session; by default min(60, 2000 // sessions), so that each level takes
a few seconds (60 turns each at 1 session, 40 at 50, 10 at 200). "ticks" is how many
times the ticker woke: when the loop is saturated it wakes once per pass over every
ready task, so lag there is the whole pass.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import tempfile
import threading
from collections.abc import Callable, Sequence
from time import perf_counter
from typing import Any

from agentloop import AgentLoop, IncomingMessage, LlmReply, LlmRequest, Role, Session, tool
from agentloop.adapters import open_note_taking, open_stores
from agentloop.logging import configure_logging
from agentloop.testing import RecordingChannel, ScriptedLLM
from systems import standard_pipeline
from systems.notes import add_note_taking

TARGET_SESSIONS = 50
TARGET_P99_MS = 5.0
TARGET_MAX_MS = 20.0
TICK_S = 0.001
IDLE_S = 1.0
TOOL_EVERY = 4
WARMUP_SESSIONS = 10
WARMUP_TURNS = 4


class SlowLLM:
    """A model that awaits `delay` seconds per call, then answers a short unique text,
    or asks for `lookup_order` when the user asks about an order."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.calls = 0

    async def complete(self, request: LlmRequest) -> LlmReply:
        await asyncio.sleep(self.delay)
        self.calls += 1
        last = request.messages[-1]
        if last.role is Role.USER and "order" in (last.content or "") and request.tools:
            return ScriptedLLM.tool_call("lookup_order", {"order_id": f"A{self.calls}"})
        return LlmReply(f"Answer {self.calls}: the office opens at eight.", model="bench")


@tool
def lookup_order(order_id: str) -> str:
    """Look up an order's status."""
    return f"order {order_id} shipped"


class StoreTimer:
    """Wraps the public methods of store objects so each call's duration is kept."""

    def __init__(self) -> None:
        self.slowest: dict[str, float] = {}
        self.calls = 0
        self._lock = threading.Lock()

    def wrap(self, label: str, store: object) -> None:
        """Time the calls of `store`, or of the synchronous store under an async port."""
        engine = getattr(store, "engine", None)
        if engine is not None:
            store = engine
        else:
            label += " (loop)"
        for name in dir(store):
            if name.startswith("_") or name in ("close", "open", "save", "save_index"):
                continue
            method = getattr(store, name)
            if callable(method) and hasattr(method, "__self__"):
                setattr(store, name, self._timed(f"{label}.{name}", method))

    def _timed(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                elapsed = (perf_counter() - t0) * 1000.0
                with self._lock:
                    self.calls += 1
                    if elapsed > self.slowest.get(name, 0.0):
                        self.slowest[name] = elapsed

        return timed

    def reset(self) -> None:
        with self._lock:
            self.slowest.clear()
            self.calls = 0

    def worst(self) -> tuple[str, float]:
        with self._lock:
            if not self.slowest:
                return "-", 0.0
            name = max(self.slowest, key=self.slowest.__getitem__)
            return name, self.slowest[name]


async def ticker(lags: list[float], stop: asyncio.Event) -> None:
    """Sleep `TICK_S` at a time; record each wake-up's lateness in ms."""
    expected = perf_counter() + TICK_S
    while not stop.is_set():
        await asyncio.sleep(TICK_S)
        woke = perf_counter()
        lags.append((woke - expected) * 1000.0)
        expected = woke + TICK_S


async def run_session(loop: AgentLoop, session: Session, turns: int) -> None:
    for turn in range(turns):
        if turn % TOOL_EVERY == TOOL_EVERY - 1:
            text = f"Where is my order from turn {turn}?"
        else:
            text = f"Question {turn} from {session.user_id}: when does the office open?"
        await loop.run_turn(session, IncomingMessage(text))


def default_turns(sessions: int) -> int:
    return max(2, min(60, 2000 // sessions))


def sessions_for(level: str, count: int) -> list[Session]:
    return [
        Session(f"{level}-s{i}", user_id=f"{level}-u{i}", project_id=f"{level}-p{i}", team_id="t1", org_id="o1")
        for i in range(count)
    ]


class Level:
    """What one level measured."""

    def __init__(self, sessions: int, turns: int, seconds: float, lags: list[float], slowest: tuple[str, float]) -> None:
        self.sessions = sessions
        self.turns = turns
        self.seconds = seconds
        self.lags = lags
        self.slowest = slowest


async def measure(loop: AgentLoop, timer: StoreTimer, count: int, turns: int) -> Level:
    lags: list[float] = []
    stop = asyncio.Event()
    sessions = sessions_for(f"n{count}", count)
    timer.reset()
    ticking = asyncio.create_task(ticker(lags, stop))
    await asyncio.sleep(0.01)
    lags.clear()
    started = perf_counter()
    if count:
        await asyncio.gather(*(run_session(loop, session, turns) for session in sessions))
    else:
        await asyncio.sleep(IDLE_S)
    seconds = perf_counter() - started
    stop.set()
    await ticking
    return Level(count, count * turns, seconds, lags, timer.worst())


async def run(
    levels: Sequence[int], turns: int | None, delay: float, max_concurrent_turns: int | None = None
) -> tuple[list[Level], int]:
    """The idle row, then one row per session count; and how many tool executions capture wrote."""
    llm = SlowLLM(delay)
    timer = StoreTimer()
    results: list[Level] = []
    with tempfile.TemporaryDirectory() as data_dir, open_stores(data_dir) as stores:
        with standard_pipeline(llm, RecordingChannel(), stores=stores, tools=[lookup_order]) as pipeline:
            with open_note_taking(stores, llm) as note_taking:
                add_note_taking(pipeline, note_taking)
                loop = pipeline.build(max_concurrent_turns=max_concurrent_turns)
                for label, store in (
                    ("sessions", stores.sessions),
                    ("memory", stores.memory),
                    ("rag", stores.rag),
                    ("notes", stores.knowledge),
                ):
                    timer.wrap(label, store)
                warmup = sessions_for("warmup", WARMUP_SESSIONS)
                await asyncio.gather(*(run_session(loop, session, WARMUP_TURNS) for session in warmup))
                results.append(await measure(loop, timer, 0, 0))
                for count in levels:
                    per_session = turns if turns is not None else default_turns(count)
                    results.append(await measure(loop, timer, count, per_session))
            captured = note_taking.recorder.stats  # closed: every accepted execution is written
    return results, captured.written


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", default="1,50,200", help="comma-separated concurrent session counts")
    parser.add_argument("--turns", type=int, default=None, help="turns per session (default: min(60, 2000 // sessions))")
    parser.add_argument("--model-delay", type=float, default=0.05, help="seconds each model call awaits")
    parser.add_argument("--max-concurrent-turns", type=int, default=None, help="bound on the turns in flight (default: none)")
    args = parser.parse_args(argv)
    levels = [int(part) for part in args.sessions.split(",") if part.strip()]
    configure_logging("WARNING")
    results, captured = asyncio.run(run(levels, args.turns, args.model_delay, args.max_concurrent_turns))
    target = f"p99 <= {TARGET_P99_MS:g} ms, max <= {TARGET_MAX_MS:g} ms at {TARGET_SESSIONS} sessions"
    print(f"event-loop lag: {TICK_S * 1000:g} ms ticker, model awaits {args.model_delay * 1000:g} ms per call, "
          f"standard pipeline + note-taking on SQLite, "
          f"{'no bound on turns in flight' if args.max_concurrent_turns is None else f'at most {args.max_concurrent_turns} turns in flight'}")
    header = (f"{'sessions':>8} {'turns':>6} {'turns/s':>8} {'ticks':>6} {'lag p50':>10} {'lag p99':>10} {'lag max':>10}"
              f"  {'slowest store call':<34} target")
    print(header)
    for level in results:
        lags = sorted(level.lags)
        p50 = statistics.median(lags)
        p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
        worst = lags[-1]
        name, slowest = level.slowest
        rate = f"{level.turns / level.seconds:8.1f}" if level.turns else f"{'-':>8}"
        verdict = ""
        if level.sessions == TARGET_SESSIONS:
            verdict = target + ("  ok" if p99 <= TARGET_P99_MS and worst <= TARGET_MAX_MS else "  MISSED")
        store = f"{name} {slowest:.2f} ms" if level.sessions else "-"
        print(f"{level.sessions if level.sessions else 'idle':>8} {level.turns:>6} {rate} {len(lags):>6} {p50:>7.2f} ms {p99:>7.2f} ms"
              f" {worst:>7.2f} ms  {store:<34} {verdict}".rstrip())
    print(f"tool executions captured and written by the background writer: {captured}")


if __name__ == "__main__":
    main()
