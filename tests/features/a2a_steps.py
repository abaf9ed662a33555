"""Steps for serving.feature's A2A scenario: the official `a2a-sdk` client against the served bot."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.helpers.proto_helpers import get_artifact_text, new_text_message
from a2a.types.a2a_pb2 import GetTaskRequest, Role, SendMessageRequest, Task, TaskState
from a2a.utils.errors import TaskNotFoundError
from google.protobuf import json_format
from pytest_bdd import parsers, then, when

from serve_kit import ALICE, BOB, auth


@pytest.fixture
def a2a() -> dict[str, Any]:
    """The task the scenario's A2A client last saw."""
    return {}


async def _send(url: str, token: str, text: str, task: Task | None) -> Task:
    message = new_text_message(text, role=Role.ROLE_USER, task_id=task.id if task else None, context_id=task.context_id if task else None)
    async with httpx.AsyncClient(headers=auth(token), timeout=30) as http:
        client = await create_client(url, ClientConfig(streaming=False, httpx_client=http))
        [answer] = [event async for event in client.send_message(SendMessageRequest(message=message))]
    return answer.task


@when(parsers.parse('an A2A client with alice\'s token sends "{text}"'))
def _a2a_send(bot: Any, a2a: dict[str, Any], text: str) -> None:
    bot.client()
    a2a["task"] = asyncio.run(_send(str(bot.http.base_url), ALICE, text, None))


@when(parsers.parse('the A2A client answers the task with "{text}"'))
def _a2a_answer(bot: Any, a2a: dict[str, Any], text: str) -> None:
    a2a["task"] = asyncio.run(_send(str(bot.http.base_url), ALICE, text, a2a["task"]))


@then(parsers.parse("the A2A task is input-required for {tool}"))
def _a2a_input_required(a2a: dict[str, Any], tool: str) -> None:
    task = a2a["task"]
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert json_format.MessageToDict(task.status.message.parts[1].data)["tool"] == tool


@then(parsers.parse('the A2A task is completed with the answer "{text}"'))
def _a2a_completed(a2a: dict[str, Any], text: str) -> None:
    task = a2a["task"]
    assert task.status.state == TaskState.TASK_STATE_COMPLETED and get_artifact_text(task.artifacts[0]) == text


@then("bob's A2A client does not find that task")
def _a2a_hidden(bot: Any, a2a: dict[str, Any]) -> None:
    async def ask() -> None:
        async with httpx.AsyncClient(headers=auth(BOB), timeout=30) as http:
            client = await create_client(str(bot.http.base_url), ClientConfig(streaming=False, httpx_client=http))
            await client.get_task(GetTaskRequest(id=a2a["task"].id))

    with pytest.raises(TaskNotFoundError):
        asyncio.run(ask())
