"""Remote agents over A2A as tools: an agentloop bot calls a pydantic-ai agent served by fasta2a, and another
agentloop server, each on a loopback port, through `a2a_tools`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import GetTaskRequest, Task, TaskState
from fasta2a.pydantic_ai import agent_to_a2a
from fasta2a.schema import AgentCapabilities, Skill
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from structlog.testing import capture_logs

import serve_kit
from agentloop import FinishReason, IncomingMessage, LlmReply, LlmRequest, Role, Session
from agentloop.adapters.a2a import A2aAgentError, A2aToolset, a2a_tools
from agentloop.context import AgentContext
from agentloop.serve import create_app
from agentloop.testing import RecordingChannel, ScriptedLLM
from agentloop.testing.serve import served
from serve_kit import ALICE, GatedLLM, auth, settings
from systems import StandardOptions, standard_pipeline


def asks(tool: str) -> Callable[[LlmRequest], LlmReply | str]:
    """A parent model that passes the user's message to `tool`, then quotes what the tool returned."""

    def reply(request: LlmRequest) -> LlmReply | str:
        last = request.messages[-1]
        if last.role is Role.TOOL:
            return f"The agent said: {last.content}"
        return ScriptedLLM.tool_call(tool, {"message": last.content or ""})

    return reply


def prompts(messages: list[ModelMessage]) -> list[str]:
    """The user prompts a pydantic-ai model was given, oldest first."""
    return [str(part.content) for message in messages if isinstance(message, ModelRequest)
            for part in message.parts if isinstance(part, UserPromptPart)]


class Calculator:
    """A pydantic-ai agent with a function model: it answers "4" to the sum it is asked, and fails on "fail"."""

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked = prompts(messages)
        self.seen.append(asked)
        if asked[-1] == "fail":
            raise RuntimeError("the calculator broke")
        return ModelResponse(parts=[TextPart(f"2 + 2 = 4 (question {len(asked)})")])

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> Any:
        answer = self.answer(messages, info).parts[0]
        assert isinstance(answer, TextPart)
        for word in answer.content.split(" "):
            yield word + " "


@pytest.fixture(params=["streaming", "polling"])
def calculator(request: pytest.FixtureRequest) -> Iterator[tuple[str, Calculator]]:
    """A pydantic-ai agent served over A2A with fasta2a (pydantic-ai's own A2A server) on a loopback port; its card
    says it streams, or (polling) that it does not, so a call asks for the task until it ends."""
    model = Calculator()
    agent = Agent(FunctionModel(model.answer, stream_function=model.stream), name="calculator")
    skill = Skill(id="arithmetic", name="arithmetic", description="Adds and multiplies numbers.", tags=["math"],
                  input_modes=["text/plain"], output_modes=["text/plain"])
    app = agent_to_a2a(agent, name="calculator", skills=[skill])
    if request.param == "polling":
        app._capabilities = lambda: AgentCapabilities(streaming=False, push_notifications=False)  # type: ignore[method-assign]
    with served(app) as url:
        app.url = url + "/"  # the card names the JSON-RPC endpoint, which is on the port just taken
        yield url, model


def run(pipeline_tools: A2aToolset, tmp_path: Path, llm: ScriptedLLM, *messages: IncomingMessage,
        options: StandardOptions | None = None) -> list[AgentContext]:
    """The turns of `messages` in one session of a standard bot with the remote agent's tools."""
    with standard_pipeline(llm, RecordingChannel(), data_dir=tmp_path / "parent", tools=pipeline_tools, options=options) as pipeline:
        loop = pipeline.build()
        return [loop.run_turn_sync(Session("s1", user_id="u1"), message) for message in messages]


def test_a_bot_asks_a_pydantic_ai_agent_served_by_fasta2a_and_quotes_its_answer_in_one_remote_context_per_session(
    calculator: tuple[str, Calculator], tmp_path: Path
) -> None:
    url, model = calculator
    tools = asyncio.run(a2a_tools(url))
    assert [(t.name, t.spec.description) for t in tools] == [
        ("arithmetic", "Ask the remote agent 'calculator': Adds and multiplies numbers.")]
    first, second = run(tools, tmp_path, ScriptedLLM(asks("arithmetic")), IncomingMessage("what is 2 + 2?"),
                        IncomingMessage("and again?"))
    assert [ctx.turn_outcome.assistant_text for ctx in (first, second) if ctx.turn_outcome] == [
        "The agent said: 2 + 2 = 4 (question 1) ", "The agent said: 2 + 2 = 4 (question 2) "]
    # the second call continued the remote conversation the first one started
    assert model.seen[-1] == ["what is 2 + 2?", "and again?"]
    assert first.failures == () and second.failures == ()


def test_a_remote_task_that_fails_is_the_tools_failure_told_to_the_model_and_the_user_is_still_answered(
    calculator: tuple[str, Calculator], tmp_path: Path
) -> None:
    url, _ = calculator
    tools = asyncio.run(a2a_tools(url))
    llm = ScriptedLLM(asks("arithmetic"))
    [ctx] = run(tools, tmp_path, llm, IncomingMessage("fail"))
    told = [m.content for m in llm.requests[-1].messages if m.role is Role.TOOL]
    assert told == ["error: A2aAgentError: the agent 'calculator' ended its task failed"]
    assert ctx.turn_outcome is not None and ctx.turn_outcome.assistant_text.startswith("The agent said: error:")
    assert [(f.component, f.kind.value) for f in ctx.failures] == [("arithmetic", "exception")]


def test_an_agent_that_is_not_there_is_an_error_naming_its_url() -> None:
    with pytest.raises(A2aAgentError, match=r"could not read the agent card at http://127.0.0.1:9/"):
        asyncio.run(a2a_tools("http://127.0.0.1:9/", connect_timeout=5))


@pytest.mark.parametrize(("approved", "remote_answer", "deleted"), [(True, "a.txt is gone.", ["a.txt"]), (False, "Left alone.", [])])
def test_a_remote_agentloop_bots_approval_reaches_the_user_of_the_calling_bot_and_the_decision_resumes_the_same_task(
    tmp_path: Path, approved: bool, remote_answer: str, deleted: list[str]
) -> None:
    serve_kit.deleted.clear()
    remote = ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": "a.txt"}), remote_answer])
    with served(create_app(settings(tmp_path, llm=remote, pipeline="serve_kit:approval_bot"))) as url:
        tools = asyncio.run(a2a_tools(url, token=ALICE, prefix="files_"))
        assert [t.name for t in tools] == ["files_chat", "files_delete_file", "files_send_voice"]  # a skill per tool of the remote bot
        llm = ScriptedLLM(asks("files_chat"))
        with standard_pipeline(llm, RecordingChannel(), data_dir=tmp_path / "parent", tools=tools) as pipeline:
            loop = pipeline.build()
            asked = loop.run_turn_sync(Session("s1", user_id="u1"), IncomingMessage("please delete a.txt"))
            assert asked.turn_outcome is not None and asked.turn_outcome.approval is not None
            request = asked.turn_outcome.approval
            deleted_before = list(serve_kit.deleted)
            decided = loop.run_turn_sync(Session("s1", user_id="u1"), IncomingMessage.approval(request.approval_id, approved=approved))
    assert asked.turn_outcome.finish_reason is FinishReason.AWAITING_APPROVAL and deleted_before == []
    assert (request.tool, request.arguments, request.session_id) == ("delete_file", {"path": "a.txt"}, "s1")
    assert decided.turn_outcome is not None and decided.turn_outcome.assistant_text == f"The agent said: {remote_answer}"
    assert serve_kit.deleted == deleted and len(remote.requests) == 2  # one remote task: asked, then resumed
    assert decided.failures == ()


def test_when_the_calling_turns_deadline_passes_the_remote_task_is_cancelled(tmp_path: Path) -> None:
    remote = GatedLLM("Working on it", " ... done.")

    async def fetched(url: str, task_id: str) -> Task:
        async with httpx.AsyncClient(headers=auth(ALICE)) as http:
            client = await create_client(url, ClientConfig(streaming=False, httpx_client=http))
            return await client.get_task(GetTaskRequest(id=task_id))

    with served(create_app(settings(tmp_path, llm=remote))) as url:
        tools = asyncio.run(a2a_tools(url, token=ALICE))
        try:
            with capture_logs() as logs:
                [ctx] = run(tools, tmp_path, ScriptedLLM(asks("chat")), IncomingMessage("take your time"),
                            options=StandardOptions(turn_timeout=2.0))
        finally:
            remote.release.set()
        [cancelled] = [log for log in logs if log["event"] == "a2a.task_cancelled"]
        task = asyncio.run(fetched(url, cancelled["task_id"]))
    assert ctx.turn_outcome is not None and ctx.turn_outcome.finish_reason is FinishReason.DEADLINE
    assert task.status.state == TaskState.TASK_STATE_CANCELED


class HeldTurn:
    """A calling turn whose one approval another call already holds: it refuses the next."""

    session = Session("s1", user_id="u1")

    def await_approval(self, request: object) -> bool:
        return False


def test_a_task_asking_for_input_while_another_call_awaits_the_user_is_a_tool_error_and_keeps_no_task() -> None:
    from a2a.types.a2a_pb2 import AgentCard

    from agentloop.adapters.a2a import _Agent, _Progress

    agent = _Agent(AgentCard(name="files"), {}, None, 1.0)
    progress = _Progress(task_id="t1", context_id="c1", state=TaskState.TASK_STATE_INPUT_REQUIRED)
    with pytest.raises(A2aAgentError, match="another call awaits the user's approval; ask again after it is decided"):
        agent._result("files_chat", progress, HeldTurn())  # type: ignore[arg-type]
    assert agent.waiting == {}


def test_an_agent_keeps_the_most_recent_contexts_and_waiting_tasks_and_forgets_the_oldest(monkeypatch: pytest.MonkeyPatch) -> None:
    from a2a.types.a2a_pb2 import AgentCard

    from agentloop.adapters import a2a

    monkeypatch.setattr(a2a, "_REMEMBERED", 2)
    agent = a2a._Agent(AgentCard(name="files"), {}, None, 1.0)
    for n in range(3):
        a2a._remember(agent.contexts, f"s{n}", f"c{n}")
    a2a._remember(agent.contexts, "s1", "c1")
    assert list(agent.contexts.items()) == [("s2", "c2"), ("s1", "c1")]


def test_two_remote_tasks_asking_for_input_in_one_step_ask_the_user_once_and_the_other_task_is_cancelled(tmp_path: Path) -> None:
    remote = ScriptedLLM(lambda request: ScriptedLLM.tool_call("delete_file", {"path": request.messages[-1].content or ""}))
    with served(create_app(settings(tmp_path, llm=remote, pipeline="serve_kit:approval_bot"))) as url:
        tools = asyncio.run(a2a_tools(url, token=ALICE, prefix="files_"))
        both = LlmReply(tool_calls=(
            *ScriptedLLM.tool_call("files_chat", {"message": "a.txt"}).tool_calls,
            *ScriptedLLM.tool_call("files_chat", {"message": "b.txt"}).tool_calls,
        ))
        llm = ScriptedLLM([both])
        with capture_logs() as logs:
            [ctx] = run(tools, tmp_path, llm, IncomingMessage("delete a.txt and b.txt"))
        [cancelled] = [log for log in logs if log["event"] == "a2a.task_cancelled"]
        task = asyncio.run(fetched_task(url, cancelled["task_id"]))
    assert ctx.turn_outcome is not None and ctx.turn_outcome.approval is not None
    assert ctx.turn_outcome.approval.arguments["path"] in ("a.txt", "b.txt")
    assert task.status.state == TaskState.TASK_STATE_CANCELED


async def fetched_task(url: str, task_id: str) -> Task:
    async with httpx.AsyncClient(headers=auth(ALICE)) as http:
        client = await create_client(url, ClientConfig(streaming=False, httpx_client=http))
        return await client.get_task(GetTaskRequest(id=task_id))
