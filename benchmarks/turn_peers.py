"""The standard turn beside its peers in one run: a text turn and a one-tool-call turn, medians in ms.

Contestants, each with an instant model that answers text, or first asks for `lookup_order`
then answers (the tool turn):

- agentloop, the standard pipeline on SQLite stores with note-taking (history, memory, RAG,
  note retrieval and capture: what a deployed bot runs);
- agentloop without storage: the same systems with no store (like for like with the peers,
  which keep nothing between runs);
- pydantic-ai `Agent.run` with a `FunctionModel`; a LangGraph model+tools graph
  (`ToolNode`, `tools_condition`); Haystack's `Agent` with a chat generator double.

Rounds alternate between contestants so the machine's noise hits them all. A peer that is
not installed prints "not installed" (`pip install '.[bench]'`).

    python benchmarks/turn_peers.py [--turns 500] [--rounds 5] [--warmup 50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from time import perf_counter
from typing import Any

from agentloop import IncomingMessage, LlmReply, LlmRequest, Role, Session, tool
from agentloop.adapters import open_note_taking, open_stores
from agentloop.logging import configure_logging
from agentloop.testing import RecordingChannel, ScriptedLLM
from systems import ContextBuildingSystem, MemoryPersistSystem, RagIndexingSystem, standard_pipeline
from systems.notes import add_note_taking

QUESTION = "What time does the office open on Mondays?"
TOOL_QUESTION = "Where is my order A17?"
ANSWER = "The office opens at eight on Mondays."
TARGET_FULL_X = 10.0
TARGET_BARE_PYDANTIC_X = 50.0
TARGET_BARE_OTHERS_X = 15.0

Turn = Callable[[str], Awaitable[object]]


def lookup_order(order_id: str) -> str:
    """Look up an order's status."""
    return f"order {order_id} shipped"


class InstantLLM:
    """Answers at once: asks for `lookup_order` when the user asks about an order, else a text."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: LlmRequest) -> LlmReply:
        self.calls += 1
        last = request.messages[-1]
        if last.role is Role.USER and "order" in (last.content or "") and request.tools:
            return ScriptedLLM.tool_call("lookup_order", {"order_id": "A17"})
        return LlmReply(f"{ANSWER} ({self.calls})", model="bench")


@contextmanager
def agentloop_turns(data_dir: str, *, storage: bool) -> Iterator[Turn]:
    """A turn of the standard pipeline: on SQLite with note-taking, or with no store at all."""
    llm = InstantLLM()
    channel = RecordingChannel()
    with open_stores(data_dir) as stores, standard_pipeline(llm, channel, stores=stores, tools=[tool(lookup_order)]) as pipeline:
        with ExitStack() as stack:
            if storage:
                add_note_taking(pipeline, stack.enter_context(open_note_taking(stores, llm)))
            else:
                pipeline.remove(MemoryPersistSystem).remove(RagIndexingSystem)
                pipeline.replace(ContextBuildingSystem, ContextBuildingSystem(pipeline.get(ContextBuildingSystem).system_prompt))
            loop = pipeline.build()
            session = Session("bench", user_id="bench-user", project_id="bench-project")

            async def turn(text: str) -> object:
                outcome = await loop.run_turn(session, IncomingMessage(text))
                channel.sent.clear()
                return outcome

            yield turn


def pydantic_ai_turn() -> Turn | None:
    try:
        from pydantic_ai import Agent
        from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
        from pydantic_ai.models.function import AgentInfo, FunctionModel
    except ImportError:
        return None

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[-1]
        if "order" in str(getattr(last, "content", "")) and not isinstance(last, ToolReturnPart):
            return ModelResponse(parts=[ToolCallPart("lookup_order", {"order_id": "A17"})])
        return ModelResponse(parts=[TextPart(ANSWER)])

    agent: Any = Agent(FunctionModel(answer), system_prompt="You are a helpful assistant.", tools=[lookup_order])

    async def turn(text: str) -> object:
        return await agent.run(text)

    return turn


def langgraph_turn() -> Turn | None:
    try:
        from langchain_core.messages import AIMessage, HumanMessage
        from langchain_core.tools import tool as lc_tool
        from langgraph.graph import START, MessagesState, StateGraph
        from langgraph.prebuilt import ToolNode, tools_condition
    except ImportError:
        return None

    def model(state: MessagesState) -> dict[str, list[Any]]:
        last = state["messages"][-1]
        if isinstance(last, HumanMessage) and "order" in str(last.content):
            call = {"name": "lookup_order", "args": {"order_id": "A17"}, "id": "call-1", "type": "tool_call"}
            return {"messages": [AIMessage("", tool_calls=[call])]}
        return {"messages": [AIMessage(ANSWER)]}

    graph: Any = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", ToolNode([lc_tool(lookup_order)]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    app = graph.compile()

    async def turn(text: str) -> object:
        return await app.ainvoke({"messages": [HumanMessage(text)]})

    return turn


def haystack_turn() -> Turn | None:
    try:
        from haystack import component
        from haystack.components.agents import Agent
        from haystack.dataclasses import ChatMessage, ToolCall
        from haystack.tools.tool import Tool
    except ImportError:
        return None

    @component
    class Generator:
        """A chat generator double: a tool call for an order question, else the answer."""

        @component.output_types(replies=list[ChatMessage])
        def run(self, messages: list[ChatMessage], tools: Any = None, **kwargs: Any) -> dict[str, list[ChatMessage]]:
            last = messages[-1]
            if last.is_from("user") and "order" in (last.text or ""):
                return {"replies": [ChatMessage.from_assistant(tool_calls=[ToolCall("lookup_order", {"order_id": "A17"})])]}
            return {"replies": [ChatMessage.from_assistant(ANSWER)]}

    parameters = {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}
    agent = Agent(
        chat_generator=Generator(),
        tools=[Tool("lookup_order", "Look up an order's status.", parameters, lookup_order)],
        system_prompt="You are a helpful assistant.",
    )
    agent.warm_up()

    async def turn(text: str) -> object:
        return agent.run(messages=[ChatMessage.from_user(text)])

    return turn


async def time_turns(turn: Turn, text: str, count: int) -> list[float]:
    times = []
    for _ in range(count):
        t0 = perf_counter()
        await turn(text)
        times.append((perf_counter() - t0) * 1000.0)
    return times


async def peers(turns: int, rounds: int, warmup: int) -> list[tuple[str, dict[str, list[float]] | None]]:
    """Each contestant's text and tool turn times (ms), in alternating rounds; None when not installed."""
    with tempfile.TemporaryDirectory() as full_dir, tempfile.TemporaryDirectory() as bare_dir:
        with agentloop_turns(full_dir, storage=True) as full, agentloop_turns(bare_dir, storage=False) as bare:
            contestants: list[tuple[str, Turn | None]] = [
                ("agentloop, SQLite stores + note-taking", full),
                ("agentloop, no storage", bare),
                ("pydantic-ai Agent.run, FunctionModel", pydantic_ai_turn()),
                ("LangGraph model+tools graph", langgraph_turn()),
                ("Haystack Agent", haystack_turn()),
            ]
            samples: dict[str, dict[str, list[float]]] = {
                name: {"text": [], "tool": []} for name, turn in contestants if turn is not None
            }
            for name, turn in contestants:
                if turn is not None:
                    await time_turns(turn, QUESTION, warmup)
                    await time_turns(turn, TOOL_QUESTION, warmup)
            per_round = max(1, turns // rounds)
            for _ in range(rounds):
                for name, turn in contestants:
                    if turn is not None:
                        samples[name]["text"] += await time_turns(turn, QUESTION, per_round)
                        samples[name]["tool"] += await time_turns(turn, TOOL_QUESTION, per_round)
    return [(name, samples.get(name)) for name, _ in contestants]


def print_peers(results: list[tuple[str, dict[str, list[float]] | None]], turns: int, rounds: int) -> None:
    medians = {name: {kind: statistics.median(times) for kind, times in s.items()} for name, s in results if s is not None}
    full = medians["agentloop, SQLite stores + note-taking"]
    bare = medians["agentloop, no storage"]
    print(f"the standard turn beside its peers: {turns} turns of each kind per contestant in {rounds} alternating rounds, "
          "medians; an instant model")
    width = max(len(name) for name, _ in results)
    print(f"{'':<{width}}  {'text turn':>10}  {'tool turn':>10}")
    for name, s in results:
        if s is None:
            print(f"{name:<{width}}  {'not installed':>22}  pip install '.[bench]'")
        else:
            print(f"{name:<{width}}  {medians[name]['text']:>7.3f} ms  {medians[name]['tool']:>7.3f} ms")
    print("ratios (peer / agentloop; text turn, tool turn)")
    targets = (
        ("pydantic-ai Agent.run, FunctionModel", full, "agentloop with storage", TARGET_FULL_X),
        ("pydantic-ai Agent.run, FunctionModel", bare, "agentloop no storage", TARGET_BARE_PYDANTIC_X),
        ("LangGraph model+tools graph", bare, "agentloop no storage", TARGET_BARE_OTHERS_X),
        ("Haystack Agent", bare, "agentloop no storage", TARGET_BARE_OTHERS_X),
    )
    for peer, ours, label, target in targets:
        name = f"{peer.split()[0]} / {label}"
        if peer not in medians:
            print(f"{name:<{width}}  {'not installed':>22}")
            continue
        text, tool_ = medians[peer]["text"] / ours["text"], medians[peer]["tool"] / ours["tool"]
        verdict = "ok" if min(text, tool_) >= target else "MISSED"
        print(f"{name:<{width}}  {text:>9.1f}x  {tool_:>9.1f}x  >= {target:g}x  {verdict}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=500, help="timed turns of each kind per contestant")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=50)
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    rounds = max(1, min(args.rounds, args.turns))
    print_peers(asyncio.run(peers(args.turns, rounds, args.warmup)), args.turns, rounds)


if __name__ == "__main__":
    main()
