"""What the MCP server tests share: a bot to serve, and the official `mcp` SDK client over HTTP with a bearer token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agentloop import LlmReply, LlmRequest, Role
from agentloop.ports import Channel, Stores
from agentloop.testing import ScriptedLLM
from serve_kit import delete_file
from systems import StandardPipeline, standard_pipeline


def _echo_or_delete(request: LlmRequest) -> LlmReply | str:
    """Asks to run `delete_file` on the path after "delete ", says what the tool said, or echoes the user."""
    last = request.messages[-1]
    if last.role is Role.TOOL:
        return f"done: {last.content}"
    text = last.content or ""
    if text.startswith("delete "):
        return ScriptedLLM.tool_call("delete_file", {"path": text.removeprefix("delete ")})
    return f"echo: {text}"


def echo_or_delete_bot(channel: Channel, stores: Stores) -> StandardPipeline:
    """The standard bot on a scripted model: it echoes, and "delete PATH" asks for `delete_file`, which needs approval."""
    return standard_pipeline(ScriptedLLM(_echo_or_delete), channel, stores=stores, tools=[delete_file])


@asynccontextmanager
async def mcp_client(
    url: str, token: str | None, *, mode: Literal["legacy", "auto"] = "auto", statuses: list[int] | None = None
) -> AsyncIterator[Client]:
    """The SDK's client on the server at `url`/mcp with `token` as bearer (none when None), `mode` "legacy" for the
    initialize handshake; the HTTP status of every response is appended to `statuses`."""

    async def record(response: httpx2.Response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    hooks: dict[str, Any] = {"response": [record]}
    async with httpx2.AsyncClient(headers=headers, event_hooks=hooks, timeout=httpx2.Timeout(30.0, read=120.0)) as http:
        async with Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode) as client:
            yield client
