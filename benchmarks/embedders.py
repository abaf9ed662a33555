"""What embedding a text costs code on an event loop, and whether it holds the loop up.

Run: python benchmarks/embedders.py
For the default HashingEmbedder and for OpenAIEmbedder against a loopback server that
answers after `--server-delay` seconds, times one text's embedding awaited the way the
stores await it (`aembed`) next to the other way an async caller could use a synchronous
embedder (`asyncio.to_thread(embed)`, for OpenAIEmbedder a fresh event loop on the worker
thread), and the loop's lag (p99) while the calls are in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from agentloop.adapters import HashingEmbedder
from agentloop.adapters.embedders.openai import OpenAIEmbedder
from agentloop.ports import Vectors
from agentloop.testing.http import ScriptedServer

TEXT = ["How much is 200 euros in dollars, and what should I pack for Oslo in March?"]


async def _timed(call: Callable[[], Awaitable[Vectors]], calls: int) -> tuple[float, float]:
    """Median ms per call, and the p99 lag (ms) of a 1 ms ticker on the loop meanwhile,
    after one call not counted (loading the TLS context once, the first connection)."""
    await call()
    lags: list[float] = []
    running = True

    async def ticker() -> None:
        while running:
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append((time.perf_counter() - before - 0.001) * 1000)

    tick = asyncio.create_task(ticker())
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - start) * 1000)
    running = False
    await tick
    return statistics.median(samples), statistics.quantiles(lags, n=100)[98] if len(lags) > 1 else 0.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=200, help="embeddings per way (default: 200)")
    parser.add_argument("--server-delay", type=float, default=0.02, help="seconds the server takes to answer (default: 0.02)")
    args = parser.parse_args(argv)
    hashing = HashingEmbedder()
    with ScriptedServer() as server:
        openai = OpenAIEmbedder(server.url, "bench", dim=384)
        ways: list[tuple[str, Callable[[], Awaitable[Vectors]], int]] = [
            ("hashing  aembed (inline)", lambda: hashing.aembed(TEXT), 0),
            ("hashing  to_thread(embed)", lambda: asyncio.to_thread(hashing.embed, TEXT), 0),
            ("openai   aembed (async HTTP)", lambda: openai.aembed(TEXT), args.calls),
            ("openai   to_thread(embed)", lambda: asyncio.to_thread(openai.embed, TEXT), args.calls),
        ]
        print(f"{'way':<30} {'per call':>10} {'loop lag p99':>16}   ({args.calls} calls, server answers in {args.server_delay * 1000:.0f} ms)")
        for label, call, answers in ways:
            for _ in range(answers + 1 if answers else 0):
                server.reply(body={"data": [{"index": 0, "embedding": [1.0] * 384}]}, delay=args.server_delay)
            per_call, lag = asyncio.run(_timed(call, args.calls))
            print(f"{label:<30} {per_call:>7.3f} ms {lag:>13.2f} ms")


if __name__ == "__main__":
    main()
