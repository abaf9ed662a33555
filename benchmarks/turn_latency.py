"""Median framework time of a full standard turn, next to the 1 ms target and to a baseline release.

The turn runs the whole standard pipeline: sanitization, context building with history,
memory and RAG retrieval (SQLite + hnswlib + the hashing embedder), the tool loop with a
ScriptedLLM, finalization, the feedback guarantee, routing to a RecordingChannel, and
memory and RAG persistence. Framework time is the turn's wall time minus the time spent
inside the model; "until the user is answered" stops at the channel's send, before the
side effects (memory, RAG) that run after delivery.

The same turns are timed on the code of `--baseline REV` (default: release 0.1) in the
same run: git extracts REV's `agentloop` and `systems` into a temporary directory, and
two worker processes, one per code base, run the turns in alternating rounds so that
noise on the machine hits both. The ratios this checkout / baseline must stay <= 1.0.
Without git or the commit (`--baseline none` to skip), only this checkout is timed.
With pydantic-ai installed, the same text turn through `pydantic_ai.Agent` with a
`FunctionModel` is timed as well.

With `--notes` the bot also takes notes (note retrieval before the model, capture after).

    python benchmarks/turn_latency.py [--turns 1000] [--rounds 10] [--baseline REV|none] [--notes]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from time import perf_counter
from typing import IO, Any

import attrs
from agentloop import IncomingMessage, LlmReply, LlmRequest, Session, Usage
from agentloop.logging import configure_logging
from agentloop.testing import RecordingChannel, Sent
from systems import standard_pipeline

TARGET_MS = 1.0
TARGET_RATIO = 1.0
EMBEDDER_TARGET_RATIO = 1.3
"""The default (semantic) embedder's turn against the hashing embedder's, with --baseline-embedder hashing."""
RELEASE_0_1 = "2da023a"
ROOT = Path(__file__).resolve().parents[1]
QUESTION = "What time does the office open on Mondays?"
ANSWER = "The office opens at eight on Mondays."


def reported_usage(usage_type: type[Usage] = Usage) -> Usage:
    """What a model server reports for a turn of a chat with history: most of the prompt read from its cache
    (on a `--baseline` whose `Usage` counts no cache, such as 355eca1's, the tokens alone)."""
    cached = {"cache_read_tokens": 1024} if "cache_read_tokens" in attrs.fields_dict(usage_type) else {}
    return usage_type(1200, 40, **cached)


USAGE = reported_usage()


class TimedLLM:
    """A model answering instantly (a distinct text each turn, with the `USAGE` a real server
    reports, so usage accounting runs) that adds up its own time."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    async def complete(self, request: LlmRequest) -> LlmReply:
        t0 = perf_counter()
        self.calls += 1
        reply = LlmReply(f"{ANSWER} (answer {self.calls})", model="gpt-4o", usage=USAGE)
        self.seconds += perf_counter() - t0
        return reply


class TimedChannel(RecordingChannel):
    """Notes when the whole answer reached the channel (sent, or its stream closed), i.e. when the user was answered."""

    delivered_at = 0.0

    def _deliver(self, item: Sent) -> None:
        if item.kind == "text":
            self.delivered_at = perf_counter()
        super()._deliver(item)


Samples = dict[str, list[float]]


def make_embedder(name: str | None) -> Any:
    """The embedder called `name` (hashing or wordllama), or None for the stores' default."""
    if name is None:
        return None
    from agentloop.adapters import HashingEmbedder, WordLlamaEmbedder

    return {"hashing": HashingEmbedder, "wordllama": WordLlamaEmbedder}[name]()


async def serve_rounds(commands: IO[str], results: IO[str], *, notes: bool = False, embedder: str | None = None) -> None:
    """Worker: for each line `N` read, run N standard turns on one growing bot (with note-taking
    if `notes`) and write their times (ms) as one JSON line; turns with `"warmup"` in the line
    are run but not timed."""
    llm = TimedLLM()
    with tempfile.TemporaryDirectory() as data_dir, ExitStack() as stack:
        channel = TimedChannel()
        with standard_pipeline(llm, channel, data_dir=data_dir, embedder=make_embedder(embedder)) as pipeline:
            if notes:
                from agentloop.adapters import open_note_taking
                from systems.notes import add_note_taking

                assert pipeline.stores is not None
                add_note_taking(pipeline, stack.enter_context(open_note_taking(pipeline.stores, llm)))
            loop = pipeline.build()
            session = Session("bench", user_id="bench-user")
            for line in commands:
                samples: Samples = {"total": [], "framework": [], "answered": []}
                for _ in range(int(line.split()[0])):
                    llm.seconds = 0.0
                    t0 = perf_counter()
                    await loop.run_turn(session, IncomingMessage(QUESTION))
                    elapsed = perf_counter() - t0
                    channel.sent.clear()
                    samples["total"].append(elapsed * 1000.0)
                    samples["framework"].append((elapsed - llm.seconds) * 1000.0)
                    samples["answered"].append((channel.delivered_at - t0 - llm.seconds) * 1000.0)
                results.write(json.dumps({} if "warmup" in line else samples) + "\n")
                results.flush()


class Worker:
    """A process timing turns on the code base at `code` (this script, that PYTHONPATH)."""

    def __init__(self, code: Path, *, notes: bool = False, embedder: str | None = None) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")])}
        options = [*(["--notes"] if notes else []), *(["--embedder", embedder] if embedder else [])]
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", *options], cwd=code, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        self.samples: Samples = {"total": [], "framework": [], "answered": []}

    def run(self, turns: int, *, warmup: bool = False) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{turns}{' warmup' if warmup else ''}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the benchmark worker on {self.process.args} exited with {self.process.wait()}")
        for name, times in json.loads(line).items():
            self.samples[name].extend(times)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


@contextmanager
def baseline_checkout(rev: str, paths: Sequence[str] = ("agentloop", "systems")) -> Iterator[Path | str]:
    """A temporary directory with `rev`'s `paths` (its agentloop and systems), or why there is none."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", rev, *paths],
            capture_output=True, check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as error:
        reason = error.stderr.decode().strip().splitlines()[-1] if isinstance(error, subprocess.CalledProcessError) else error
        yield f"git cannot give {rev} here ({reason})"
        return
    with tempfile.TemporaryDirectory(prefix="agentloop-baseline-") as directory:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(directory, filter="data")
        yield Path(directory)


async def pydantic_ai_turns(turns: int, warmup: int) -> list[float] | None:
    try:
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
        from pydantic_ai.models.function import AgentInfo, FunctionModel
    except ImportError:
        return None

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(ANSWER)])

    agent: Any = Agent(FunctionModel(answer), system_prompt="You are a helpful assistant.")
    times: list[float] = []
    for i in range(warmup + turns):
        t0 = perf_counter()
        await agent.run(QUESTION)
        if i >= warmup:
            times.append((perf_counter() - t0) * 1000.0)
    return times


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def start_workers(args: argparse.Namespace, stack: ExitStack) -> tuple[Path | str, list[Worker]]:
    """The workers to time, this checkout's first, closed with `stack`; and the baseline's code, or why there is none."""
    if args.baseline_embedder:
        args.baseline = f"{args.baseline_embedder} embedder"
        baseline: Path | str = ROOT
        workers = [Worker(ROOT, notes=args.notes, embedder=args.embedder),
                   Worker(ROOT, notes=args.notes, embedder=args.baseline_embedder)]
    else:
        baseline = stack.enter_context(baseline_checkout(args.baseline)) if args.baseline != "none" else "--baseline none"
        workers = [Worker(ROOT, notes=args.notes, embedder=args.embedder)]
        workers += [Worker(baseline, notes=args.notes)] if isinstance(baseline, Path) else []
    for worker in workers:
        stack.callback(worker.close)
    return baseline, workers


def baseline_rows(median: dict[str, float], samples: Samples, args: argparse.Namespace) -> list[tuple[str, str, str, str]]:
    """The baseline's medians and this checkout's ratio to them, against the target."""
    base = {name: statistics.median(times) for name, times in samples.items()}
    rows = []
    for name, label in (("framework", "standard turn, framework time"), ("answered", "until the user is answered")):
        ratio = median[name] / base[name]
        rows.append((f"{label}, {args.baseline} (median)", f"{base[name]:.3f} ms", "", ""))
        target = EMBEDDER_TARGET_RATIO if args.baseline_embedder else TARGET_RATIO
        rows.append((f"{label}, this / {args.baseline}", f"{ratio:.2f}x", f"<= {target:.2f}x", verdict(ratio <= target)))
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=1000, help="timed turns per code base")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10, help="alternating rounds the turns are split into")
    parser.add_argument("--baseline", default=RELEASE_0_1, help=f"git revision to compare with (default {RELEASE_0_1}, release 0.1), or none")
    parser.add_argument("--notes", action="store_true", help="add note-taking (note retrieval and capture) to the bot")
    parser.add_argument("--embedder", choices=["hashing", "wordllama"], help="this checkout's embedder (default: the stores' default)")
    parser.add_argument("--baseline-embedder", choices=["hashing", "wordllama"],
                        help="compare with this checkout using this embedder instead of a git revision")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    if args.serve:
        asyncio.run(serve_rounds(sys.stdin, sys.stdout, notes=args.notes, embedder=args.embedder))
        return
    with ExitStack() as stack:
        baseline, workers = start_workers(args, stack)
        for worker in workers:
            worker.run(args.warmup, warmup=True)
        rounds = max(1, min(args.rounds, args.turns))
        for r in range(rounds):
            for worker in workers:
                worker.run(args.turns // rounds + (r < args.turns % rounds))
    ours = workers[0].samples
    median = {name: statistics.median(times) for name, times in ours.items()}
    rows = [
        ("standard turn, framework time (median)", f"{median['framework']:.3f} ms", f"<= {TARGET_MS:.1f} ms",
         verdict(median["framework"] <= TARGET_MS)),
        ("standard turn, wall time (median)", f"{median['total']:.3f} ms", "", ""),
        ("until the user is answered (median)", f"{median['answered']:.3f} ms", "", ""),
        ("standard turn, framework time (p90)", f"{statistics.quantiles(ours['framework'], n=10)[-1]:.3f} ms", "", ""),
    ]
    if len(workers) == 2:
        rows += baseline_rows(median, workers[1].samples, args)
    peer = asyncio.run(pydantic_ai_turns(args.turns, args.warmup))
    if peer is None:
        rows.append(("pydantic-ai Agent.run, FunctionModel", "not installed", "pip install '.[bench]'", ""))
    else:
        theirs = statistics.median(peer)
        rows.append(("pydantic-ai Agent.run, FunctionModel (median)", f"{theirs:.3f} ms", "", ""))
        rows.append(("ratio pydantic-ai / agentloop", f"{theirs / median['framework']:.2f}x", "", ""))
    width = max(len(r[0]) for r in rows)
    print(f"turn latency over {args.turns} turns ({args.warmup} warm-up) per code base in {rounds} alternating rounds, "
          f"history/memory/RAG{'/notes' if args.notes else ''} growing")
    if isinstance(baseline, str):
        print(f"no baseline: {baseline}; timing this checkout only")
    for name, value, target, mark in rows:
        print(f"{name.ljust(width)}  {value:>14}  {target:<24} {mark}".rstrip())


if __name__ == "__main__":
    main()
