"""Per-system dispatch cost of AgentLoop: no-op systems, failure capture, timing and
checked access on; and what checking a system's declared access costs per `ctx.get`.

Run: python benchmarks/loop_overhead.py
Prints the median cost per system over a 10-system pipeline next to the 0.15 µs target,
and the per-access cost of the check next to its 0.1 µs target, against the unchecked
lookup of the same run; with langgraph importable, also times a 10-node LangGraph chain.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import timeit

import attrs

from agentloop import AgentContext, AgentLoop, IncomingMessage, Session, System

TARGET_US = 0.15
ACCESS_TARGET_US = 0.1
ACCESSES = 200_000
SYSTEMS = 10
TURNS = 2_000
REPEATS = 7


def noop_pipeline(size: int) -> list[System]:
    systems: list[System] = []
    for index in range(size):
        cls = type(f"Noop{index}", (System,), {"order": index, "process": lambda self, ctx: None})
        systems.append(cls())
    return systems


def _per_system_us(loop: AgentLoop, size: int) -> float:
    """Median over repeats of (time of a turn with `size` systems - time with none) / size."""
    empty = AgentLoop([])
    session = Session("bench")
    incoming = IncomingMessage("hi")

    async def run(target: AgentLoop) -> float:
        start = time.perf_counter()
        for _ in range(TURNS):
            await target.run_turn(session, incoming)
        return (time.perf_counter() - start) / TURNS

    async def measure() -> list[float]:
        samples = []
        for _ in range(REPEATS):
            full = await run(loop)
            base = await run(empty)
            samples.append((full - base) / size * 1e6)
        return samples

    return statistics.median(asyncio.run(measure()))


@attrs.frozen
class Probe:
    value: int = 0


class ProbeReader(System):
    order = 0
    reads = (Probe,)

    def process(self, ctx: AgentContext) -> None:
        pass


def access_us() -> tuple[float, float, float]:
    """Median µs per call of a bare dict lookup, of `ctx.get` unchecked, and of `ctx.get`
    while a system that declares the type runs (the check on)."""
    ctx = AgentContext(Session("bench"), IncomingMessage("hi"), components=[Probe()])
    table = {Probe: Probe()}

    def per_call(statement: str) -> float:
        names = {"ctx": ctx, "table": table, "Probe": Probe}
        return statistics.median(timeit.repeat(statement, globals=names, number=ACCESSES, repeat=REPEATS)) / ACCESSES * 1e6

    bare = per_call("table.get(Probe)")
    unchecked = per_call("ctx.get(Probe)")
    with ctx._running(ProbeReader()):
        checked = per_call("ctx.get(Probe)")
    return bare, unchecked, checked


def langgraph_per_node_us(size: int) -> float | None:
    try:
        from typing import TypedDict

        from langgraph.graph import END, START, StateGraph
    except ImportError:
        return None

    class State(TypedDict):
        n: int

    def build(nodes: int):  # type: ignore[no-untyped-def]
        graph = StateGraph(State)
        previous = START
        for index in range(nodes):
            graph.add_node(f"n{index}", lambda state: {"n": state["n"] + 1})
            graph.add_edge(previous, f"n{index}")
            previous = f"n{index}"
        graph.add_edge(previous, END)
        return graph.compile()

    chain, single = build(size), build(1)
    rounds = 200
    samples = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(rounds):
            chain.invoke({"n": 0})
        full = (time.perf_counter() - start) / rounds
        start = time.perf_counter()
        for _ in range(rounds):
            single.invoke({"n": 0})
        base = (time.perf_counter() - start) / rounds
        samples.append((full - base) / (size - 1) * 1e6)
    return statistics.median(samples)


def main() -> None:
    logging_off()
    ours = _per_system_us(AgentLoop(noop_pipeline(SYSTEMS)), SYSTEMS)
    print(f"{'measure':<44}{'measured':>12}{'target':>12}")
    print(f"{'agentloop dispatch per no-op system':<44}{ours:>10.3f}µs{TARGET_US:>10.2f}µs")
    bare, unchecked, checked = access_us()
    print(f"{'dict lookup (reference)':<44}{bare:>10.3f}µs")
    print(f"{'ctx.get, checking off':<44}{unchecked:>10.3f}µs")
    print(f"{'ctx.get, checking on':<44}{checked:>10.3f}µs")
    cost = checked - unchecked
    print(f"{'checked access: cost per access':<44}{cost:>10.3f}µs{ACCESS_TARGET_US:>10.2f}µs"
          f"   (checked ctx.get = {checked / bare:.1f}x the dict lookup, unchecked {unchecked / bare:.1f}x)")
    peer = langgraph_per_node_us(SYSTEMS)
    if peer is None:
        print("langgraph not importable: peer comparison skipped (pip install '.[bench]')")
    else:
        print(f"{'langgraph per node (10-node chain)':<44}{peer:>10.3f}µs")
        print(f"{'ratio langgraph / agentloop':<44}{peer / ours:>11.1f}x")


def logging_off() -> None:
    """Benchmark the production path: info-level logging filtered out of the hot loop."""
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


if __name__ == "__main__":
    main()
