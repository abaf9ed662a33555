"""One message to a served bot through each protocol `agentloop serve` speaks, each driven by its official client:
start a session with it, or send it in a session by id, the answer's text back or the protocol's own not-found."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable

import attrs
import httpx
import openai
from a2a.client import AuthInterceptor, ClientCallContext, ClientConfig, CredentialService, create_client
from a2a.helpers.proto_helpers import get_artifact_text, new_text_message
from a2a.types.a2a_pb2 import Role, SendMessageRequest, TaskState
from a2a.utils.errors import JSON_RPC_ERROR_CODE_MAP, TaskNotFoundError
from ag_ui.core import EventType

from agui_kit import events_of, run_input, said
from mcp_kit import mcp_client
from serve_kit import auth

_names = itertools.count(1)


@attrs.frozen
class NotFound:
    """The protocol's answer for a session that is not the caller's, as its client showed it."""

    said: str


@attrs.frozen
class Answered:
    """The bot's answer to the message, and the session the protocol named for it."""

    session_id: str
    text: str


Send = Callable[[str, str, str, str | None], Awaitable[Answered | NotFound]]
"""`(url, token, text, session id or None for a new session)` -> what the protocol's client got back."""


async def native(url: str, token: str, text: str, session_id: str | None) -> Answered | NotFound:
    async with httpx.AsyncClient(base_url=url, headers=auth(token), timeout=30) as http:
        if session_id is None:
            session_id = (await http.post("/v1/sessions")).json()["session_id"]
        reply = await http.post(f"/v1/sessions/{session_id}/messages", json={"text": text})
    if reply.status_code == 404:
        return NotFound(f"404 {reply.json()['error']['code']}")
    assert reply.status_code == 200, reply.text
    return Answered(session_id, reply.json()["text"])


async def openai_chat(url: str, token: str, text: str, session_id: str | None) -> Answered | NotFound:
    """A chat completion to the one model the server lists, in the session `session_id` (a new one when None)."""
    metadata = {} if session_id is None else {"metadata": {"session_id": session_id}}
    async with openai.AsyncOpenAI(base_url=f"{url}/openai/v1", api_key=token, max_retries=0) as client:
        [model] = [model.id async for model in client.models.list()]
        try:
            completion = await client.chat.completions.create(model=model, messages=[{"role": "user", "content": text}], **metadata)
        except openai.NotFoundError as refused:
            if refused.body["code"] != "not_found":  # type: ignore[index]
                raise
            return NotFound(f"{refused.status_code} {refused.body['code']}")  # type: ignore[index]
    return Answered(completion.metadata["session_id"], completion.choices[0].message.content or "")  # type: ignore[attr-defined]


class _Token(CredentialService):
    """The bearer token for the agent card's security scheme."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def get_credentials(self, security_scheme_name: str, context: ClientCallContext | None) -> str | None:
        return self.token if security_scheme_name == "bearer" else None


async def a2a(url: str, token: str, text: str, session_id: str | None) -> Answered | NotFound:
    """A message in the context `session_id` (a new context when None), by a client made from the agent card."""
    async with httpx.AsyncClient(timeout=30) as http:
        client = await create_client(url, ClientConfig(streaming=False, httpx_client=http), interceptors=[AuthInterceptor(_Token(token))])
        message = new_text_message(text, context_id=session_id, role=Role.ROLE_USER)
        try:
            [event] = [event async for event in client.send_message(SendMessageRequest(message=message))]
        except TaskNotFoundError:
            return NotFound(f"TaskNotFoundError {JSON_RPC_ERROR_CODE_MAP[TaskNotFoundError]}")
    assert event.task.status.state == TaskState.TASK_STATE_COMPLETED, event
    return Answered(event.task.context_id, get_artifact_text(event.task.artifacts[0]))


async def agui(url: str, token: str, text: str, session_id: str | None) -> Answered | NotFound:
    """A run in the thread `session_id` (a thread of a fresh name, a new session, when None); every event validated."""
    thread = session_id or f"tenancy-thread-{next(_names)}"
    headers = {**auth(token), "Accept": "text/event-stream"}
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(f"{url}/agui/run", json=run_input(thread, text), headers=headers)
    if response.status_code == 404:
        return NotFound(f"404 {response.json()['error']['code']}")
    assert response.status_code == 200, response.text
    events = events_of(response.text)
    assert events[-1].type is EventType.RUN_FINISHED, events[-1]
    return Answered(events[0].metadata["agentloop"]["sessionId"], said(events)[-1])  # type: ignore[attr-defined]


async def mcp(url: str, token: str, text: str, session_id: str | None) -> Answered | NotFound:
    """The `ask` tool, in the session `session_id` (a new one when None)."""
    arguments = {"message": text} if session_id is None else {"message": text, "session_id": session_id}
    async with mcp_client(url, token) as client:
        called = await client.call_tool("ask", arguments)
    reply = called.content[0].text  # type: ignore[union-attr]
    if called.is_error and reply.startswith("there is no session"):
        return NotFound("tool error: there is no session")
    assert not called.is_error, reply
    return Answered(called.structured_content["session_id"], reply)  # type: ignore[index]


PROTOCOLS: dict[str, Send] = {"native": native, "openai": openai_chat, "a2a": a2a, "agui": agui, "mcp": mcp}
NOT_FOUND = {
    "native": NotFound("404 not_found"), "openai": NotFound("404 not_found"), "a2a": NotFound("TaskNotFoundError -32001"),
    "agui": NotFound("404 not_found"), "mcp": NotFound("tool error: there is no session"),
}
"""What each protocol answers for a session id that names no session of the caller's."""
