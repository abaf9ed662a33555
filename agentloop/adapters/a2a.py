"""Remote agents over A2A as agentloop tools: each skill on an agent's card is a tool. Needs the `a2a` extra.

    tools = await a2a_tools("http://billing.internal:8000", token=os.environ["BILLING_TOKEN"])
    pipeline = standard_pipeline(llm, channel, stores=stores, tools=tools)

A call sends the model's `message` to the agent, with the official a2a-sdk client made from the agent's card
(A2A 1.0, or 0.3 when the card says so), follows the task to its end and returns the agent's answer. The
remote context is kept per session of the calling bot, so a second call continues the same conversation.
When the calling turn is cut short (its deadline, an interruption) or `timeout` passes, the remote task is
cancelled. A task that asks for input (`input-required`) ends the calling turn awaiting the user's approval;
the user's decision goes back to that same task (docs/adr/0030-remote-agents-over-a2a.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import attrs
import httpx
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.client.client import Client
from a2a.client.errors import A2AClientError
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError
from google.protobuf import json_format, struct_pb2

from agentloop._log import get_logger
from agentloop._names import new_id
from agentloop.approvals import ApprovalDecision, ApprovalRequest
from agentloop.errors import AgentloopError
from agentloop.tools import EnclosingTurn, Tool, enclosing_turn, tool

__all__ = ["DEFAULT_A2A_CONNECT_TIMEOUT", "DEFAULT_A2A_TIMEOUT", "A2aAgentError", "A2aToolset", "a2a_tools"]

_log = get_logger("agentloop.a2a")

DEFAULT_A2A_TIMEOUT = 300.0
"""Seconds a remote task may take before its tool call fails with `TimeoutError` (and the task is cancelled)."""
DEFAULT_A2A_CONNECT_TIMEOUT = 30.0
"""Seconds allowed to reach the agent: to read its card, or to open a request."""
_CANCEL_TIMEOUT = 5.0
"""How long a cancelled call waits for the agent to acknowledge `CancelTask`."""
_POLL_SECONDS = 0.2
"""How often a task is asked for (`GetTask`) when no stream tells of it."""
_ENDED = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED,
                    TaskState.TASK_STATE_REJECTED})
_PAUSED = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
_V = TypeVar("_V")
_REMEMBERED = 1024
"""The calling sessions whose remote context, and the approvals whose task, an agent keeps (the most recent)."""
_MESSAGE = "what to ask the agent, in words it understands alone"


class A2aAgentError(RuntimeError, AgentloopError):
    """A remote agent could not be reached, or its task failed, was rejected or cancelled; the message says which."""


@attrs.define
class _Progress:
    """What is known of one remote task so far: its ids, state, what its agent said, its artifacts' text by id."""

    task_id: str = ""
    context_id: str = ""
    state: int = TaskState.TASK_STATE_UNSPECIFIED
    said: Message | None = None
    artifacts: dict[str, str] = attrs.Factory(dict)

    def read(self, event: StreamResponse) -> None:
        kind = event.WhichOneof("payload")
        if kind == "task":
            self.read_task(event.task)
        elif kind == "message":  # an agent may answer with a message and no task
            self.said, self.state = event.message, TaskState.TASK_STATE_COMPLETED
            self.context_id = event.message.context_id or self.context_id
        elif kind == "status_update":
            self.task_id, self.context_id = event.status_update.task_id, event.status_update.context_id
            self._status(event.status_update.status.state, event.status_update.status)
        elif kind == "artifact_update":
            artifact = event.artifact_update.artifact
            text = _text(artifact.parts)
            kept = self.artifacts.get(artifact.artifact_id, "") if event.artifact_update.append else ""
            self.artifacts[artifact.artifact_id] = kept + text

    def read_task(self, task: Task) -> None:
        self.task_id, self.context_id = task.id, task.context_id
        self._status(task.status.state, task.status)
        if task.artifacts:
            self.artifacts = {artifact.artifact_id: _text(artifact.parts) for artifact in task.artifacts}

    def _status(self, state: int, status: Any) -> None:
        self.state = state
        if status.HasField("message"):
            self.said = status.message

    @property
    def said_text(self) -> str:
        return _text(self.said.parts) if self.said is not None else ""

    @property
    def answer(self) -> str:
        """The agent's answer: its artifacts' text, or what it said when it made none."""
        return "\n".join(text for text in self.artifacts.values() if text) or self.said_text

    @property
    def asked(self) -> dict[str, Any]:
        """The data part of what the agent said when it asked for input, if it gave one as an object."""
        for part in self.said.parts if self.said is not None else ():
            if part.WhichOneof("content") == "data":
                value = json_format.MessageToDict(part.data)
                if isinstance(value, dict):
                    return value
        return {}


@attrs.frozen
class _Waiting:
    """A remote task that asked for input, under the approval id its calling turn awaits."""

    task_id: str
    context_id: str


class _TurnHeld(A2aAgentError):
    """A task asked for input while another call of the turn awaits the user's decision: it is cancelled."""


class _Agent:
    """One remote agent: its card, how to reach it, its contexts by calling session and the tasks awaiting a decision."""

    def __init__(self, card: AgentCard, headers: Mapping[str, str], timeout: float | None, connect_timeout: float) -> None:
        self.card, self.headers, self.timeout, self.connect_timeout = card, dict(headers), timeout, connect_timeout
        self.tls = httpx.create_ssl_context()  # made once: making one is most of what opening an HTTP client costs
        self.contexts: OrderedDict[str, str] = OrderedDict()
        self.waiting: OrderedDict[str, _Waiting] = OrderedDict()

    async def call(self, tool: str, message: str) -> str:
        """Ask the agent `message` (or give it the user's decision this run resumes), as the tool `tool`."""
        turn = enclosing_turn()
        decision = turn.decision if turn is not None else None
        if decision is not None:
            waiting = self.waiting.pop(decision.approval_id, None)
            if waiting is None:
                raise A2aAgentError(
                    f"the agent {self.card.name!r} asked for this decision in another process, which kept its task; "
                    f"ask again"
                )
            outgoing = _decision_message(waiting, decision)
        else:
            context = self.contexts.get(turn.session.id, "") if turn is not None else ""
            outgoing = Message(message_id=new_id(), role=Role.ROLE_USER, context_id=context, parts=[Part(text=message)])
        progress = await self._follow(outgoing)
        if turn is not None and progress.context_id:
            _remember(self.contexts, turn.session.id, progress.context_id)
        try:
            return self._result(tool, progress, turn)
        except _TurnHeld:
            async with self._client() as client:
                await self._cancel(client, progress)
            raise

    def _result(self, tool: str, progress: _Progress, turn: EnclosingTurn | None) -> str:
        """The answer of a completed task; an input-required one awaits the user's approval; any other state raises."""
        if progress.state == TaskState.TASK_STATE_COMPLETED:
            return progress.answer
        if progress.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            if turn is None:
                raise A2aAgentError(
                    f"the agent {self.card.name!r} asks for input ({progress.said_text}), and this call runs outside a "
                    f"bot's turn, whose user could answer; call the tool from a bot's tool loop"
                )
            return self._ask_user(tool, progress, turn)
        state = TaskState.Name(progress.state).removeprefix("TASK_STATE_").lower().replace("_", "-")
        said = f": {progress.said_text}" if progress.said_text else ""
        raise A2aAgentError(f"the agent {self.card.name!r} ended its task {state}{said}")

    def _ask_user(self, tool: str, progress: _Progress, turn: EnclosingTurn) -> str:
        """End the calling turn awaiting its user's decision on what the task asks: the remote call (`tool` and
        `arguments` of the agent's data part) or its question; the task is kept under the approval's id."""
        approval_id = new_id()
        asked = progress.asked
        shown = asked.get("arguments")
        arguments = shown if isinstance(shown, dict) else {"question": progress.said_text}
        name = asked.get("tool") if isinstance(asked.get("tool"), str) else tool
        if not turn.await_approval(ApprovalRequest(approval_id, str(name), arguments, turn.session.id, "", datetime.now(UTC))):
            raise _TurnHeld(
                f"the agent {self.card.name!r} asks the user: {progress.said_text}, but another call awaits the "
                f"user's approval; ask again after it is decided"
            )
        _remember(self.waiting, approval_id, _Waiting(progress.task_id, progress.context_id))
        return f"the agent {self.card.name!r} asks the user: {progress.said_text}"

    async def _follow(self, outgoing: Message) -> _Progress:
        """Send `outgoing` and follow its task until it ends or asks for input; cancel it if this call is cut short."""
        progress = _Progress()
        async with self._client() as client:
            try:
                async with asyncio.timeout(self.timeout):
                    async for event in client.send_message(SendMessageRequest(message=outgoing)):
                        progress.read(event)
                    while progress.state not in _ENDED | _PAUSED:
                        await asyncio.sleep(_POLL_SECONDS)
                        progress.read_task(await client.get_task(GetTaskRequest(id=progress.task_id)))
            except TimeoutError:
                await self._cancel(client, progress)
                raise TimeoutError(
                    f"the agent {self.card.name!r} did not finish within {self.timeout} s; its task was cancelled (pass a "
                    f"larger timeout= to a2a_tools if it is slow)"
                ) from None
            except asyncio.CancelledError:  # the calling turn's deadline passed, or it was interrupted
                await self._cancel(client, progress)
                raise
            except (A2AError, A2AClientError, httpx.HTTPError) as error:
                raise A2aAgentError(f"the agent {self.card.name!r} refused or failed the call: {_describe(error)}") from error
        return progress

    @contextlib.asynccontextmanager
    async def _client(self) -> AsyncIterator[Client]:
        """A client of the agent, on an HTTP client of its own closed after the block."""
        limits = httpx.Timeout(self.connect_timeout, read=None)
        transport = _ZonedTimestamps(self.tls)
        async with httpx.AsyncClient(headers=self.headers, timeout=limits, verify=self.tls, transport=transport) as http:
            yield await create_client(self.card, ClientConfig(streaming=self.card.capabilities.streaming, httpx_client=http))

    async def _cancel(self, client: Client, progress: _Progress) -> None:
        """Cancel the task, if it was created and still runs; a refusal is logged, never raised."""
        if not progress.task_id or progress.state in _ENDED:
            return
        try:
            async with asyncio.timeout(_CANCEL_TIMEOUT):
                await client.cancel_task(CancelTaskRequest(id=progress.task_id))
        except Exception as error:
            _log.warning("a2a.cancel_failed", agent=self.card.name, task_id=progress.task_id, error=_describe(error))
            return
        _log.info("a2a.task_cancelled", agent=self.card.name, task_id=progress.task_id)


@attrs.frozen
class A2aToolset:
    """The tools of one remote agent, a tool per skill of its card (one named after the agent when it lists none)."""

    card: AgentCard
    tools: tuple[Tool, ...]

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools)

    def __len__(self) -> int:
        return len(self.tools)


async def a2a_tools(
    url: str,
    *,
    token: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float | None = DEFAULT_A2A_TIMEOUT,
    connect_timeout: float = DEFAULT_A2A_CONNECT_TIMEOUT,
    prefix: str = "",
) -> A2aToolset:
    """The tools of the A2A agent at `url` (its base URL: the card is read from its well-known path).

    `token` is sent as `Authorization: Bearer <token>` (`headers` for anything else); `timeout` bounds each
    remote task (None: only the calling turn's deadline does); `prefix` goes before every tool name.
    """
    if timeout is not None and timeout <= 0 or connect_timeout <= 0:
        raise ValueError(f"timeout and connect_timeout are in seconds and must be positive, got {timeout} and {connect_timeout}")
    sent = dict(headers or {}) | ({"Authorization": f"Bearer {token}"} if token is not None else {})
    try:
        async with httpx.AsyncClient(headers=sent, timeout=connect_timeout) as http:
            card = await A2ACardResolver(http, url.rstrip("/")).get_agent_card()
    except Exception as error:
        raise A2aAgentError(
            f"could not read the agent card at {url}: {_describe(error)}; check that the agent runs there and speaks A2A"
        ) from error
    agent = _Agent(card, sent, timeout, connect_timeout)
    skills = [(skill.id or skill.name, skill.description) for skill in card.skills] or [(card.name, card.description)]
    tools = tuple(_tool(agent, prefix + _tool_name(skill), description) for skill, description in skills)
    _log.info("a2a.connected", agent=card.name, url=url, tools=[t.name for t in tools])
    return A2aToolset(card, tools)


def _tool(agent: _Agent, name: str, description: str) -> Tool:
    async def ask(message: Annotated[str, _MESSAGE]) -> str:
        return await agent.call(name, message)

    said = f"Ask the remote agent {agent.card.name!r}: {description or agent.card.description}".strip()
    return attrs.evolve(tool(name=name, description=said)(ask), nested_approval=True)


def _tool_name(skill: str) -> str:
    """A skill's id as a tool name models accept: letters, digits, `_` and `-`, at most 64 characters."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", skill).strip("_")[:64] or "agent"


def _remember(kept: OrderedDict[str, _V], key: str, value: _V) -> None:
    """Keep `value` under `key` as the most recent entry, forgetting the oldest past `_REMEMBERED`."""
    kept.pop(key, None)
    kept[key] = value
    while len(kept) > _REMEMBERED:
        kept.popitem(last=False)


def _decision_message(waiting: _Waiting, decision: ApprovalDecision) -> Message:
    """The user's decision for the task that asked for it: a data part `{"approve", "note"}` and the same in words."""
    data: dict[str, Any] = {"approve": decision.approved} | ({"note": decision.note} if decision.note else {})
    words = ("approve" if decision.approved else "deny") + (f" {decision.note}" if decision.note else "")
    parts = [Part(data=json_format.ParseDict(data, struct_pb2.Value())), Part(text=words)]
    return Message(message_id=new_id(), role=Role.ROLE_USER, task_id=waiting.task_id, context_id=waiting.context_id, parts=parts)


def _text(parts: Any) -> str:
    return "".join(part.text for part in parts if part.WhichOneof("content") == "text")


def _describe(error: BaseException) -> str:
    message = getattr(error, "message", None) or str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


_NAIVE_TIMESTAMP = re.compile(rb'("timestamp"\s*:\s*"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)"')


class _ZonedTimestamps(httpx.AsyncBaseTransport):
    """HTTP whose JSON answers have a timestamp without a zone read as the local time it is.

    Some servers (fasta2a's in-memory storage) write task timestamps without a zone, which the a2a-sdk client
    refuses; each line of an answer (a JSON body, or one event of a stream) gets the local offset added.
    This is the one difference from the protocol these tools tolerate (docs/adr/0030-remote-agents-over-a2a.md).
    """

    def __init__(self, tls: ssl.SSLContext) -> None:
        self._http = httpx.AsyncHTTPTransport(verify=tls)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._http.handle_async_request(request)
        if response.headers.get("content-encoding", "identity") != "identity":
            return response  # compressed: its lines are not readable here, and a compressing server is not one of these
        assert isinstance(response.stream, httpx.AsyncByteStream)
        kept = [(key, value) for key, value in response.headers.multi_items() if key.lower() != "content-length"]
        return httpx.Response(response.status_code, headers=kept, stream=_ZonedLines(response.stream), extensions=response.extensions)

    async def aclose(self) -> None:
        await self._http.aclose()


class _ZonedLines(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending = b""
        async for chunk in self._stream:
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                yield _zoned(line) + b"\n"
        if pending:
            yield _zoned(pending)

    async def aclose(self) -> None:
        await self._stream.aclose()


def _zoned(line: bytes) -> bytes:
    offset = datetime.now().astimezone().strftime("%z").encode()
    return _NAIVE_TIMESTAMP.sub(lambda found: found.group(1) + offset[:3] + b":" + offset[3:] + b'"', line)
