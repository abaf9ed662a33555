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

Then like for like with storage: text turns 1 to `--session-turns` of one session, each
contestant keeping the conversation in SQLite: agentloop's standard pipeline with
note-taking (embedder `--embedder`), LangGraph compiled with its SQLite checkpointer (one
thread per session) and the OpenAI Agents SDK with its `SQLiteSession`, each with a model
inside the framework that answers at once. The contestants take turns a fifth of the
session at a time, so each runs warm and the machine's noise hits them all; the median,
the medians of the first and last fifth, and agentloop's advantage (target >= 20x, and
flat in session length) are printed.

    python benchmarks/turn_peers.py [--turns 500] [--rounds 5] [--warmup 50] [--session-turns 300] [--embedder default]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, ExitStack, contextmanager
from pathlib import Path
from time import perf_counter
from typing import Any

from agentloop import IncomingMessage, LlmReply, LlmRequest, Role, Session, tool
from agentloop.adapters import open_note_taking, open_stores
from agentloop.logging import configure_logging
from agentloop.ports import Embedder
from agentloop.testing import RecordingChannel, ScriptedLLM
from systems import ContextBuildingSystem, MemoryPersistSystem, RagIndexingSystem, standard_pipeline
from systems.notes import add_note_taking

from corpus import EMBEDDERS, embedder_named

QUESTION = "What time does the office open on Mondays?"
TOOL_QUESTION = "Where is my order A17?"
ANSWER = "The office opens at eight on Mondays."
TARGET_FULL_X = 10.0
TARGET_BARE_PYDANTIC_X = 50.0
TARGET_BARE_OTHERS_X = 15.0
TARGET_STORED_X = 20.0
TARGET_FLAT_X = 1.2
FIFTHS = 5

Turn = Callable[[str], Awaitable[object]]
SessionTurn = Callable[[str, str], Awaitable[object]]
"""A text turn in the session named by the first argument."""


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
def agentloop_turns(data_dir: str, *, storage: bool, embedder: Embedder | None = None) -> Iterator[Turn]:
    """A turn of the standard pipeline: on SQLite with note-taking, or with no store at all;
    `turn(text, session_id)` runs it in another session of the same user."""
    llm = InstantLLM()
    channel = RecordingChannel()
    with open_stores(data_dir, embedder=embedder) as stores, standard_pipeline(llm, channel, stores=stores, tools=[tool(lookup_order)]) as pipeline:
        with ExitStack() as stack:
            if storage:
                add_note_taking(pipeline, stack.enter_context(open_note_taking(stores, llm)))
            else:
                pipeline.remove(MemoryPersistSystem).remove(RagIndexingSystem)
                pipeline.replace(ContextBuildingSystem, ContextBuildingSystem(pipeline.get(ContextBuildingSystem).system_prompt))
            loop = pipeline.build()
            sessions: dict[str, Session] = {}

            async def turn(text: str, session_id: str = "bench") -> object:
                session = sessions.get(session_id) or sessions.setdefault(
                    session_id, Session(session_id, user_id="bench-user", project_id="bench-project")
                )
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


async def langgraph_sqlite_turn(path: Path, stack: AsyncExitStack) -> SessionTurn | None:
    """A model graph compiled with LangGraph's SQLite checkpointer: a thread per session."""
    try:
        from langchain_core.messages import AIMessage, HumanMessage
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
        from langgraph.graph import START, MessagesState, StateGraph
    except ImportError:
        return None

    def model(state: MessagesState) -> dict[str, list[Any]]:
        return {"messages": [AIMessage(ANSWER)]}

    checkpointer = await stack.enter_async_context(AsyncSqliteSaver.from_conn_string(str(path)))
    graph: Any = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_edge(START, "model")
    app = graph.compile(checkpointer=checkpointer)

    async def turn(session_id: str, text: str) -> object:
        return await app.ainvoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": session_id}})

    return turn


def agents_sdk_turn(path: Path) -> SessionTurn | None:
    """The OpenAI Agents SDK's `Runner.run` with a `SQLiteSession` per session and a model that answers at once."""
    try:
        from agents import Agent, Runner, SQLiteSession, set_tracing_disabled
        from agents.items import ModelResponse
        from agents.models.interface import Model
        from agents.usage import Usage
        from openai.types.responses import ResponseOutputMessage, ResponseOutputText
    except ImportError:
        return None

    class InstantModel(Model):  # type: ignore[misc]
        """Answers every request with the same assistant message."""

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            text = ResponseOutputText(type="output_text", text=ANSWER, annotations=[])
            message = ResponseOutputMessage(id="msg", type="message", role="assistant", status="completed", content=[text])
            return ModelResponse(output=[message], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the benchmark runs text turns without streaming")

    set_tracing_disabled(True)  # no trace export: it would reach for the network
    agent: Any = Agent(name="bench", instructions="You are a helpful assistant.", model=InstantModel())
    sessions: dict[str, Any] = {}

    async def turn(session_id: str, text: str) -> object:
        session = sessions.get(session_id) or sessions.setdefault(session_id, SQLiteSession(session_id, path))
        return await Runner.run(agent, text, session=session)

    return turn


async def stored_sessions(session_turns: int, warmup: int, embedder: Embedder | None) -> list[tuple[str, list[float] | None]]:
    """Each contestant's text turns 1 to `session_turns` of one new session (ms), a fifth of
    the session at a time in alternation, after `warmup` turns of another session; None when not installed."""
    with tempfile.TemporaryDirectory() as directory, agentloop_turns(directory, storage=True, embedder=embedder) as ours:
        async with AsyncExitStack() as stack:

            async def agentloop_turn(session_id: str, text: str) -> object:
                return await ours(text, session_id)  # type: ignore[call-arg]

            contestants: list[tuple[str, SessionTurn | None]] = [
                (STORED_AGENTLOOP, agentloop_turn),
                ("LangGraph + SQLite checkpointer", await langgraph_sqlite_turn(Path(directory, "langgraph.sqlite3"), stack)),
                ("OpenAI Agents SDK + SQLiteSession", agents_sdk_turn(Path(directory, "agents.sqlite3"))),
            ]
            for _, turn in contestants:
                for _ in range(warmup if turn is not None else 0):
                    await turn("warmup", QUESTION)
            times: dict[str, list[float]] = {name: [] for name, turn in contestants if turn is not None}
            for block in range(FIFTHS):  # contestants alternate by fifths of the session, each warm within one
                count = session_turns * (block + 1) // FIFTHS - session_turns * block // FIFTHS
                for name, turn in contestants:
                    for _ in range(count if turn is not None else 0):
                        t0 = perf_counter()
                        await turn("timed", QUESTION)
                        times[name].append((perf_counter() - t0) * 1000.0)
    return [(name, times.get(name)) for name, _ in contestants]


STORED_AGENTLOOP = "agentloop standard + note-taking, SQLite"


def print_stored(results: list[tuple[str, list[float] | None]], session_turns: int, embedder: str) -> None:
    fifth = max(1, session_turns // 5)
    print(f"like for like with storage: text turns 1-{session_turns} of one session, each kept in SQLite, "
          f"an instant model; agentloop's embedder: {embedder}")
    width = max(len(name) for name, _ in results) + 2
    first, last = f"turns 1-{fifth}", f"turns {session_turns - fifth + 1}-{session_turns}"
    print(f"{'':<{width}}  {'median':>10}  {first:>12}  {last:>14}  {'last/first':>10}")
    medians: dict[str, float] = {}
    for name, times in results:
        if times is None:
            print(f"{name:<{width}}  {'not installed':>22}  pip install '.[bench]'")
            continue
        medians[name] = statistics.median(times)
        early, late = statistics.median(times[:fifth]), statistics.median(times[-fifth:])
        flat = f"  <= {TARGET_FLAT_X}x  {'ok' if late / early <= TARGET_FLAT_X else 'MISSED'}" if name == STORED_AGENTLOOP else ""
        print(f"{name:<{width}}  {medians[name]:>7.3f} ms  {early:>9.3f} ms  {late:>11.3f} ms  {late / early:>9.2f}x{flat}")
    for name, _ in results[1:]:
        label = f"{name.split(' +')[0]} / agentloop (median)"
        if name not in medians:
            print(f"{label:<{width}}  {'not installed':>22}")
            continue
        ratio = medians[name] / medians[STORED_AGENTLOOP]
        print(f"{label:<{width}}  {ratio:>9.1f}x  >= {TARGET_STORED_X:g}x  {'ok' if ratio >= TARGET_STORED_X else 'MISSED'}")


async def time_turns(turn: Turn, text: str, count: int) -> list[float]:
    times = []
    for _ in range(count):
        t0 = perf_counter()
        await turn(text)
        times.append((perf_counter() - t0) * 1000.0)
    return times


async def peers(
    turns: int, rounds: int, warmup: int, embedder: Embedder | None = None
) -> list[tuple[str, dict[str, list[float]] | None]]:
    """Each contestant's text and tool turn times (ms), in alternating rounds; None when not installed."""
    with tempfile.TemporaryDirectory() as full_dir, tempfile.TemporaryDirectory() as bare_dir:
        with agentloop_turns(full_dir, storage=True, embedder=embedder) as full, agentloop_turns(bare_dir, storage=False) as bare:
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
    parser.add_argument("--session-turns", type=int, default=300, help="turns of the one session kept in SQLite (0: skip)")
    parser.add_argument("--embedder", choices=EMBEDDERS, default="default",
                        help="agentloop's embedder with storage (default: what open_stores picks)")
    args = parser.parse_args(argv)
    configure_logging("WARNING")
    rounds = max(1, min(args.rounds, args.turns))
    embedder = embedder_named(args.embedder)
    print_peers(asyncio.run(peers(args.turns, rounds, args.warmup, embedder)), args.turns, rounds)
    if args.session_turns > 0:
        results = asyncio.run(stored_sessions(args.session_turns, args.warmup, embedder))
        with tempfile.TemporaryDirectory() as directory, open_stores(directory, embedder=embedder) as stores:
            name = stores.embedder.name
        print()
        print_stored(results, args.session_turns, name)


if __name__ == "__main__":
    main()
