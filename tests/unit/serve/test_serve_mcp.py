"""The bot as an MCP server, driven by the official `mcp` SDK client: over streamable HTTP against a real
`agentloop serve` on a loopback port, and over stdio against `agentloop mcp`."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from agentloop.serve import Caller, Tokens
from agentloop.serve.auth import SECRET_VARIABLE
from agentloop.testing.http import ScriptedServer
from mcp_kit import mcp_client
from serve_kit import ALICE, BOB, CAROL, ServeRun, auth, serve_command

_ROOT = Path(__file__).resolve().parents[3]
_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_ROOT), str(_ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
"""A subprocess imports this checkout and the bots of tests/mcp_kit.py."""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeRun]:
    """One `agentloop serve` of the echo-or-delete bot for the module's tests (a burst large enough for them all)."""
    with serve_command(tmp_path_factory.mktemp("mcp"), "--pipeline", "mcp_kit:echo_or_delete_bot", "--burst", "200", env=_ENV) as run:
        yield run


def _result(called: Any) -> tuple[bool, str, dict[str, Any] | None]:
    """A tool result as (isError, its text, its structured content)."""
    return called.is_error, called.content[0].text, called.structured_content


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["initialize handshake", "2026 stateless exchanges"])
def test_an_mcp_client_lists_the_tools_and_two_asks_continue_one_session_seen_by_the_native_api(
    served: ServeRun, mode: Literal["legacy", "auto"]
) -> None:
    async def body() -> tuple[Any, ...]:
        async with mcp_client(served.url, ALICE, mode=mode) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            first = await client.call_tool("ask", {"message": "hello"})
            session_id = first.structured_content["session_id"]
            second = await client.call_tool("ask", {"message": "again", "session_id": session_id})
            return client.protocol_version, tools, _result(first), _result(second)

    version, tools, first, second = asyncio.run(body())
    assert version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert sorted(tools) == ["ask", "decide"]
    assert tools["ask"].input_schema["required"] == ["message"] and "session_id" in tools["ask"].output_schema["required"]
    assert first[:2] == (False, "echo: hello") and second[:2] == (False, "echo: again")
    assert first[2] is not None and second[2] is not None
    assert second[2]["session_id"] == first[2]["session_id"]
    assert second[2]["finish_reason"] == "success" and second[2]["approval"] is None and second[2]["turn_id"]
    history = httpx.get(f"{served.url}/v1/sessions/{first[2]['session_id']}/messages", headers=auth(ALICE)).json()
    assert [message["text"] for message in history["messages"]] == ["hello", "echo: hello", "again", "echo: again"]


def test_the_mcp_endpoint_refuses_a_client_without_a_valid_token_with_401_and_a_bearer_challenge(served: ServeRun) -> None:
    async def connect(token: str | None) -> list[int]:
        statuses: list[int] = []
        with pytest.raises(Exception) as refused:
            async with mcp_client(served.url, token, statuses=statuses):
                pass
        assert "error" in str(refused.value).lower()
        return statuses

    assert set(asyncio.run(connect(None))) == {401}
    assert set(asyncio.run(connect("not-a-token-anyone-was-given"))) == {401}
    answer = httpx.post(f"{served.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert answer.status_code == 401 and answer.headers["WWW-Authenticate"] == "Bearer"
    assert answer.json()["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("intruder", [BOB, CAROL], ids=["another org", "the same user in another team"])
def test_another_tenants_session_id_is_a_tool_error_saying_not_found_as_an_unknown_id_is(served: ServeRun, intruder: str) -> None:
    async def body() -> tuple[tuple[bool, str, Any], tuple[bool, str, Any], str]:
        async with mcp_client(served.url, ALICE) as alice:
            session_id = (await alice.call_tool("ask", {"message": "our launch date is secret"})).structured_content["session_id"]
        async with mcp_client(served.url, intruder) as other:
            foreign = _result(await other.call_tool("ask", {"message": "what is the launch date?", "session_id": session_id}))
            unknown = _result(await other.call_tool("ask", {"message": "hi", "session_id": "0123.abcd"}))
        return foreign, unknown, session_id

    foreign, unknown, session_id = asyncio.run(body())
    assert foreign == (True, f"there is no session {session_id!r} for you; call ask without a session_id to start one", None)
    assert unknown == (True, "there is no session '0123.abcd' for you; call ask without a session_id to start one", None)
    history = httpx.get(f"{served.url}/v1/sessions/{session_id}/messages", headers=auth(ALICE)).json()["messages"]
    assert [message["text"] for message in history] == ["our launch date is secret", "echo: our launch date is secret"]


def test_a_tool_call_awaiting_approval_comes_back_with_its_id_and_decide_resumes_the_turn(served: ServeRun) -> None:
    async def body() -> list[tuple[bool, str, Any]]:
        async with mcp_client(served.url, ALICE) as client:
            asked = _result(await client.call_tool("ask", {"message": "delete a.txt"}))
            assert asked[2] is not None
            decision = {"session_id": asked[2]["session_id"], "approval_id": asked[2]["approval"]["approval_id"], "approve": True}
            decided = _result(await client.call_tool("decide", decision))
            again = _result(await client.call_tool("decide", decision))
            return [asked, decided, again]

    asked, decided, again = asyncio.run(body())
    assert asked[0] is False and asked[2] is not None
    assert asked[2]["finish_reason"] == "awaiting_approval"
    approval = asked[2]["approval"]
    assert (approval["tool"], approval["arguments"]) == ("delete_file", {"path": "a.txt"})
    assert asked[1] == (
        'The bot waits for approval to run delete_file with {"path": "a.txt"}: call decide with session_id '
        f"{asked[2]['session_id']!r}, approval_id {approval['approval_id']!r} and approve true or false."
    )
    assert decided[:2] == (False, "done: deleted a.txt") and decided[2]["finish_reason"] == "success"
    assert again[:2] == (True, f"no tool call awaits approval {approval['approval_id']!r} in this session; it may have been decided already")


@pytest.mark.parametrize(
    ("arguments", "refusal"),
    [
        ({"message": "   "}, "the message is empty; send some text"),
        ({"message": "hi", "message_id": "not an id!"}, "message_id must be 1-128 letters, digits, '.', '_', ':' or '-'; send another or none"),
    ],
    ids=["a blank message", "a malformed message id"],
)
def test_a_refused_ask_is_a_tool_error_saying_why(served: ServeRun, arguments: dict[str, str], refusal: str) -> None:
    async def body() -> tuple[bool, str, Any]:
        async with mcp_client(served.url, ALICE) as client:
            return _result(await client.call_tool("ask", arguments))

    assert asyncio.run(body()) == (True, refusal, None)


def test_a_message_id_sent_again_gets_the_same_reply_not_a_second_turn(served: ServeRun) -> None:
    async def body() -> tuple[Any, Any, Any]:
        async with mcp_client(served.url, ALICE) as client:
            first = (await client.call_tool("ask", {"message": "once", "message_id": "m-1"})).structured_content
            again = (await client.call_tool("ask", {"message": "once", "message_id": "m-1", "session_id": first["session_id"]}))
            return first, again.structured_content, first["session_id"]

    first, again, session_id = asyncio.run(body())
    assert again == first
    history = httpx.get(f"{served.url}/v1/sessions/{session_id}/messages", headers=auth(ALICE)).json()["messages"]
    assert [message["text"] for message in history] == ["once", "echo: once"]


def test_an_mcp_client_over_stdio_asks_in_one_session_as_the_caller_its_flags_name_across_runs(tmp_path: Path) -> None:
    secret = "a-stdio-secret-of-enough-length"

    async def run(model: str, session_id: str | None, *messages: str) -> list[tuple[bool, str, Any]]:
        """One run of `agentloop mcp`: each message asked in turn, in `session_id` or the session the first ask starts."""
        command = [
            "-m", "agentloop.cli", "mcp", "--pipeline", "mcp_kit:echo_or_delete_bot", "--data-dir", str(tmp_path / "data"),
            "--base-url", model, "--model", "tiny", "--user", "dana", "--org", "acme",
        ]
        env = {**_ENV, SECRET_VARIABLE: secret}
        results = []
        async with Client(stdio_client(StdioServerParameters(command=sys.executable, args=command, env=env, cwd=tmp_path))) as client:
            for message in messages:
                arguments = {"message": message} if session_id is None else {"message": message, "session_id": session_id}
                results.append(_result(await client.call_tool("ask", arguments)))
                session_id = session_id or results[0][2]["session_id"]
            results.append(_result(await client.call_tool("ask", {"message": "hi", "session_id": "0123.abcd"})))
        return results

    with ScriptedServer() as model:
        first, second, unknown = asyncio.run(run(model.url, None, "hello", "again"))
        session_id = first[2]["session_id"]
        later, _ = asyncio.run(run(model.url, session_id, "still there?"))
    assert first[:2] == (False, "echo: hello") and second[:2] == (False, "echo: again") and second[2]["session_id"] == session_id
    assert unknown[:2] == (True, "there is no session '0123.abcd' for you; call ask without a session_id to start one")
    assert later[:2] == (False, "echo: still there?") and later[2]["session_id"] == session_id
    signer = Tokens({}, secret.encode())
    assert signer.owns(Caller("dana", "acme"), session_id) and not signer.owns(Caller("local"), session_id)


def test_a_tool_call_over_http_is_answered_as_one_json_body_not_an_event_stream(served: ServeRun) -> None:
    """`ask` sends no progress, so the server answers each call with its JSON-RPC result alone (cheaper than an
    SSE stream per request); the client still gets the session it opened."""
    headers = {**auth(ALICE), "Accept": "application/json, text/event-stream"}
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
    with httpx.Client(base_url=served.url, headers=headers, timeout=30) as http:
        opened = http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": opened.json()["result"]["protocolVersion"]}
        http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session).raise_for_status()
        called = http.post("/mcp", headers=session, json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "ask", "arguments": {"message": "hello"}},
        })
    assert opened.headers["content-type"].startswith("application/json")
    assert called.status_code == 200 and called.headers["content-type"].startswith("application/json")
    result = called.json()["result"]
    assert not result["isError"] and result["structuredContent"]["finish_reason"] == "success"


def test_agentloop_mcp_on_a_bot_that_cannot_be_opened_says_why_in_one_line(tmp_path: Path) -> None:
    """The bot's error reaches the CLI's one handler as it is; it was once wrapped in a RuntimeError and unwrapped again."""
    with ScriptedServer() as model:
        ran = subprocess.run(
            [sys.executable, "-m", "agentloop.cli", "mcp", "--pipeline", "no_such_module:bot", "--data-dir", str(tmp_path / "data"),
             "--base-url", model.url, "--model", "tiny"],
            env=_ENV, cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )
    assert ran.returncode == 1 and ran.stderr.startswith("agentloop: ") and "no_such_module" in ran.stderr, ran.stderr
    assert len(ran.stderr.splitlines()) == 1 and "Traceback" not in ran.stderr
