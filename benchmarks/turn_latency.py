"""Median framework time of a full standard turn, next to the 1 ms target.

The turn runs the whole standard pipeline: sanitization, context building with history,
memory and RAG retrieval (SQLite + hnswlib + the hashing embedder), the tool loop with a
ScriptedLLM, finalization, the feedback guarantee, routing to a RecordingChannel, and
memory and RAG persistence. Framework time is the turn's wall time minus the time spent
inside the model; "until the user is answered" stops at the channel's send, before the
side effects (memory, RAG) that run after delivery. With pydantic-ai installed, the same text turn through
`pydantic_ai.Agent` with a `FunctionModel` is timed in the same process.

    python benchmarks/turn_latency.py [--turns 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from time import perf_counter
from typing import Any

from agentloop import IncomingMessage, LlmReply, LlmRequest, Session
from agentloop.logging import configure_logging
from agentloop.testing import RecordingChannel
from systems import standard_pipeline

TARGET_MS = 1.0
QUESTION = "What time does the office open on Mondays?"
ANSWER = "The office opens at eight on Mondays."


class TimedLLM:
    """A model answering instantly (a distinct text each turn) that adds up its own time."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    async def complete(self, request: LlmRequest) -> LlmReply:
        t0 = perf_counter()
        self.calls += 1
        reply = LlmReply(f"{ANSWER} (answer {self.calls})", model="bench")
        self.seconds += perf_counter() - t0
        return reply


class TimedChannel(RecordingChannel):
    """Notes when the answer reached the channel, i.e. when the user was answered."""

    delivered_at = 0.0

    async def send_text(self, session: Session, text: str, hints: dict[str, str]) -> None:
        self.delivered_at = perf_counter()
        await super().send_text(session, text, hints)


async def agentloop_turns(turns: int, warmup: int) -> tuple[list[float], list[float], list[float]]:
    llm = TimedLLM()
    with tempfile.TemporaryDirectory() as data_dir:
        channel = TimedChannel()
        with standard_pipeline(llm, channel, data_dir=data_dir) as pipeline:
            loop = pipeline.build()
            session = Session("bench", user_id="bench-user")
            totals: list[float] = []
            framework: list[float] = []
            answered: list[float] = []
            for i in range(warmup + turns):
                llm.seconds = 0.0
                t0 = perf_counter()
                await loop.run_turn(session, IncomingMessage(QUESTION))
                elapsed = perf_counter() - t0
                channel.sent.clear()
                if i >= warmup:
                    totals.append(elapsed * 1000.0)
                    framework.append((elapsed - llm.seconds) * 1000.0)
                    answered.append((channel.delivered_at - t0 - llm.seconds) * 1000.0)
    return totals, framework, answered


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    args = parser.parse_args()
    configure_logging("WARNING")
    totals, framework, answered = asyncio.run(agentloop_turns(args.turns, args.warmup))
    ours = statistics.median(framework)
    rows = [
        ("standard turn, framework time (median)", f"{ours:.3f} ms", f"<= {TARGET_MS:.1f} ms",
         "ok" if ours <= TARGET_MS else "MISSED"),
        ("standard turn, wall time (median)", f"{statistics.median(totals):.3f} ms", "", ""),
        ("until the user is answered (median)", f"{statistics.median(answered):.3f} ms", "", ""),
        ("standard turn, framework time (p90)", f"{statistics.quantiles(framework, n=10)[-1]:.3f} ms", "", ""),
    ]
    peer = asyncio.run(pydantic_ai_turns(args.turns, args.warmup))
    if peer is None:
        rows.append(("pydantic-ai Agent.run, FunctionModel", "not installed", "pip install '.[bench]'", ""))
    else:
        theirs = statistics.median(peer)
        rows.append(("pydantic-ai Agent.run, FunctionModel (median)", f"{theirs:.3f} ms", "", ""))
        rows.append(("ratio pydantic-ai / agentloop", f"{theirs / ours:.2f}x", "", ""))
    width = max(len(r[0]) for r in rows)
    print(f"turn latency over {args.turns} turns ({args.warmup} warm-up), history/memory/RAG growing")
    for name, value, target, verdict in rows:
        print(f"{name.ljust(width)}  {value:>14}  {target:<24} {verdict}".rstrip())


if __name__ == "__main__":
    main()
