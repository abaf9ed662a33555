"""A2A 1.0 served beside the native API, driven by the official `a2a-sdk` client over a loopback port."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, AuthInterceptor, Client, ClientCallContext, ClientConfig, CredentialService, create_client
from a2a.client.errors import A2AClientError
from a2a.helpers.proto_helpers import get_artifact_text, get_message_text, new_text_message
from a2a.types.a2a_pb2 import CancelTaskRequest, GetTaskRequest, Message, Part, Role, SendMessageRequest, StreamResponse, Task, TaskState
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError
from google.protobuf import json_format, struct_pb2

import serve_kit
from agentloop.serve import ServeSettings, create_app
from agentloop.testing import ScriptedLLM
from agentloop.testing.serve import served
from serve_kit import ALICE, BOB, HELLO, GatedLLM, auth, serve_command, settings


class _Token(CredentialService):
    """The bearer token for the card's security scheme, as an A2A client's credential service gives it."""

    def __init__(self, token: str) -> None:
        self.token = token

    async def get_credentials(self, security_scheme_name: str, context: ClientCallContext | None) -> str | None:
        return self.token if security_scheme_name == "bearer" else None


@asynccontextmanager
async def _client(url: str, token: str | None = ALICE, *, streaming: bool = False) -> AsyncIterator[Client]:
    """An A2A client made from the agent card at `url`, sending `token` by the card's security scheme."""
    async with httpx.AsyncClient(timeout=30) as http:
        interceptors = [] if token is None else [AuthInterceptor(_Token(token))]
        client = await create_client(url, ClientConfig(streaming=streaming, httpx_client=http), interceptors=interceptors)
        yield client


async def _send(client: Client, message: Message) -> list[StreamResponse]:
    return [event async for event in client.send_message(SendMessageRequest(message=message))]


def _text(text: str, *, context_id: str = "", task_id: str = "") -> Message:
    return new_text_message(text, context_id=context_id or None, task_id=task_id or None, role=Role.ROLE_USER)


def _decision(approve: bool, task: Task) -> Message:
    data = json_format.ParseDict({"approve": approve}, struct_pb2.Value())
    return Message(message_id="decision-1", role=Role.ROLE_USER, task_id=task.id, context_id=task.context_id, parts=[Part(data=data)])


def _serve(settings: ServeSettings) -> Any:
    return served(create_app(settings))


def test_the_agent_card_names_the_json_rpc_endpoint_streaming_the_bearer_scheme_and_a_skill_per_tool(tmp_path: Path) -> None:
    async def body(url: str) -> Any:
        async with httpx.AsyncClient() as http:
            return await A2ACardResolver(http, url).get_agent_card()

    with _serve(settings(tmp_path, pipeline="serve_kit:approval_bot")) as url:
        card = asyncio.run(body(url))
    interface = card.supported_interfaces[0]
    assert (interface.url, interface.protocol_binding, interface.protocol_version) == (f"{url}/a2a", "JSONRPC", "1.0")
    assert card.capabilities.streaming and card.name == "bot"
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    assert [list(requirement.schemes) for requirement in card.security_requirements] == [["bearer"]]
    skills = {skill.id: skill.description for skill in card.skills}
    assert "chat" in skills and skills["delete_file"].startswith("Delete a file for good.")


def test_a_message_is_a_completed_task_get_task_returns_and_its_context_is_the_session_the_native_api_reads(tmp_path: Path) -> None:
    async def body(url: str) -> tuple[Task, Task, Task, list[str]]:
        async with _client(url) as client:
            [first] = await _send(client, _text("hi"))
            [second] = await _send(client, _text("again", context_id=first.task.context_id))
            fetched = await client.get_task(GetTaskRequest(id=first.task.id))
        history = httpx.get(f"{url}/v1/sessions/{first.task.context_id}/messages", headers=auth(ALICE)).json()["messages"]
        return first.task, second.task, fetched, [message["text"] for message in history]

    with _serve(settings(tmp_path)) as url:
        first, second, fetched, history = asyncio.run(body(url))
    assert first.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_artifact_text(first.artifacts[0]) == "echo: hi" and get_message_text(first.status.message) == "echo: hi"
    assert second.context_id == first.context_id and second.id != first.id
    assert get_artifact_text(second.artifacts[0]) == "echo: again"
    assert fetched == first
    assert history == ["hi", "echo: hi", "again", "echo: again"]


def test_a_streamed_message_sends_the_answer_as_artifact_updates_as_the_model_writes_then_the_completed_state(tmp_path: Path) -> None:
    llm = GatedLLM("Hello ", "world.")

    async def body(url: str) -> list[tuple[str, Any]]:
        seen: list[tuple[str, Any]] = []
        async with _client(url, streaming=True) as client:
            async for event in client.send_message(SendMessageRequest(message=_text("hi"))):
                kind = event.WhichOneof("payload")
                if kind == "artifact_update":
                    update = event.artifact_update
                    seen.append((kind, (get_artifact_text(update.artifact), update.append, update.last_chunk)))
                    llm.release.set()  # the first words arrived while the model was still writing
                else:
                    seen.append((kind, (event.task.status.state if kind == "task" else event.status_update.status.state)))
        return seen

    with _serve(settings(tmp_path, llm=llm)) as url:
        seen = asyncio.run(body(url))
    assert seen == [
        ("task", TaskState.TASK_STATE_WORKING),
        ("artifact_update", ("Hello ", False, False)),
        ("artifact_update", ("world.", True, False)),
        ("artifact_update", ("Hello world.", False, True)),
        ("status_update", TaskState.TASK_STATE_COMPLETED),
    ]


def test_cancelling_a_running_task_ends_its_stream_canceled_and_an_ended_task_cannot_be_cancelled(tmp_path: Path) -> None:
    llm = GatedLLM("Hello ", "world.")

    async def body(url: str) -> tuple[list[Any], Task, Task, str]:
        states: list[Any] = []
        async with _client(url, streaming=True) as client:
            async for event in client.send_message(SendMessageRequest(message=_text("hi"))):
                if event.WhichOneof("payload") == "artifact_update":
                    cancelled = await client.cancel_task(CancelTaskRequest(id=event.artifact_update.task_id))
                elif event.WhichOneof("payload") == "status_update":
                    states.append(event.status_update.status.state)
            llm.release.set()
            fetched = await client.get_task(GetTaskRequest(id=cancelled.id))
            with pytest.raises(TaskNotCancelableError) as refused:
                await client.cancel_task(CancelTaskRequest(id=cancelled.id))
        return states, cancelled, fetched, refused.value.message

    with _serve(settings(tmp_path, llm=llm)) as url:
        states, cancelled, fetched, refusal = asyncio.run(body(url))
    assert states == [TaskState.TASK_STATE_CANCELED]
    assert cancelled.status.state == fetched.status.state == TaskState.TASK_STATE_CANCELED
    assert "has already ended" in refusal


def _approval_settings(tmp_path: Path, then: str) -> ServeSettings:
    serve_kit.deleted.clear()
    llm = ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": "a.txt"}), then])
    return settings(tmp_path, llm=llm, pipeline="serve_kit:approval_bot")


def test_a_call_awaiting_approval_is_the_input_required_state_and_the_users_approval_resumes_the_task(tmp_path: Path) -> None:
    async def body(url: str) -> tuple[Task, list[str], Task, Task]:
        async with _client(url) as client:
            [asked] = await _send(client, _text("please delete a.txt"))
            deleted_before = list(serve_kit.deleted)
            [approved] = await _send(client, _decision(True, asked.task))
            fetched = await client.get_task(GetTaskRequest(id=asked.task.id))
        return asked.task, deleted_before, approved.task, fetched

    with _serve(_approval_settings(tmp_path, "a.txt is gone.")) as url:
        asked, deleted_before, approved, fetched = asyncio.run(body(url))
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED and deleted_before == []
    [_, call] = asked.status.message.parts
    asked_for = json_format.MessageToDict(call.data)
    assert (asked_for["tool"], asked_for["arguments"]) == ("delete_file", {"path": "a.txt"})
    assert approved.id == asked.id and approved.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_artifact_text(approved.artifacts[0]) == "a.txt is gone." and serve_kit.deleted == ["a.txt"]
    assert fetched == approved


def test_a_text_deny_in_the_context_resumes_the_waiting_task_and_cancelling_one_denies_its_call(tmp_path: Path) -> None:
    async def body(url: str) -> tuple[Task, Task]:
        async with _client(url) as client:
            [asked] = await _send(client, _text("please delete a.txt"))
            [denied] = await _send(client, _text("deny, keep it", context_id=asked.task.context_id))
            [again] = await _send(client, _text("please delete a.txt", context_id=asked.task.context_id))
            cancelled = await client.cancel_task(CancelTaskRequest(id=again.task.id))
        return denied.task, cancelled

    llm = ScriptedLLM([ScriptedLLM.tool_call("delete_file", {"path": "a.txt"}), "Left alone.",
                       ScriptedLLM.tool_call("delete_file", {"path": "a.txt"}), "Still left alone."])
    serve_kit.deleted.clear()
    with _serve(settings(tmp_path, llm=llm, pipeline="serve_kit:approval_bot")) as url:
        denied, cancelled = asyncio.run(body(url))
    assert denied.status.state == TaskState.TASK_STATE_COMPLETED and get_artifact_text(denied.artifacts[0]) == "Left alone."
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert serve_kit.deleted == [] and len(llm.requests) == 4  # the cancel's denial was a turn the model was told of


def test_no_token_is_401_and_another_tenants_context_and_task_are_not_found_like_unknown_ones(tmp_path: Path) -> None:
    async def body(url: str) -> list[str]:
        async with _client(url) as alice:
            [mine] = await _send(alice, _text("hi"))
        found = []
        async with _client(url, None) as anonymous:
            with pytest.raises(A2AClientError) as unauthorised:
                await _send(anonymous, _text("hi"))
            found.append(str(unauthorised.value))
        async with _client(url, BOB) as bob:
            for attempt in (
                lambda: _send(bob, _text("hi", context_id=mine.task.context_id)),
                lambda: bob.get_task(GetTaskRequest(id=mine.task.id)),
                lambda: bob.cancel_task(CancelTaskRequest(id=mine.task.id)),
                lambda: _send(bob, _text("hi", context_id="unknown.0123")),
            ):
                with pytest.raises(TaskNotFoundError) as missing:
                    await attempt()
                found.append(type(missing.value).__name__)
        return found

    with _serve(settings(tmp_path)) as url:
        found = asyncio.run(body(url))
    assert found[0].startswith("HTTP Error 401") and found[1:] == ["TaskNotFoundError"] * 4


def test_agentloop_serve_answers_an_a2a_client_that_found_it_by_its_card(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}

    async def body(url: str) -> Task:
        async with _client(url) as client:
            [answered] = await _send(client, _text("hi"))
        return answered.task

    with serve_command(tmp_path, env=env) as run:
        task = asyncio.run(body(run.url))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED and get_artifact_text(task.artifacts[0]) == HELLO
    assert run.returncode == 0, run.stderr
