"""Steps of serving.feature spoken through MCP: the official `mcp` SDK client on the served app's /mcp."""

from __future__ import annotations

import asyncio
from typing import Any

from pytest_bdd import parsers, then, when

from mcp_kit import mcp_client
from serve_kit import auth

_TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789ab"}


def _ask(bot: Any, who: str, text: str, session_id: str | None) -> Any:
    """`who` calls the tool ask on `bot`'s server (its model echoes); the tool's result."""
    url = str(bot.client().base_url).rstrip("/")

    async def call() -> Any:
        async with mcp_client(url, _TOKENS[who]) as client:
            return await client.call_tool("ask", {"message": text} if session_id is None else {"message": text, "session_id": session_id})

    return asyncio.run(call())


@when(parsers.parse('alice asks "{text}" through MCP'), target_fixture="mcp_answer")
def _alice_asks(bot: Any, text: str) -> Any:
    answer = _ask(bot, "alice", text, None)
    bot.session = answer.structured_content["session_id"]
    return answer


@when(parsers.parse('alice asks "{text}" through MCP in the same session'), target_fixture="mcp_answer")
def _alice_continues(bot: Any, text: str) -> Any:
    return _ask(bot, "alice", text, bot.session)


@when(parsers.parse('bob asks "{text}" through MCP in alice\'s session'), target_fixture="mcp_answer")
def _bob_intrudes(bot: Any, text: str) -> Any:
    return _ask(bot, "bob", text, bot.session)


@then(parsers.parse('the MCP answer says "{text}"'))
def _mcp_says(mcp_answer: Any, text: str) -> None:
    assert (mcp_answer.is_error, mcp_answer.content[0].text, mcp_answer.structured_content["text"]) == (False, text, text)


@then("alice's session holds both exchanges over the native API")
def _history(bot: Any) -> None:
    messages = bot.client().get(f"/v1/sessions/{bot.session}/messages", headers=auth(_TOKENS["alice"])).json()["messages"]
    assert [message["text"] for message in messages] == ["hello", "echo: hello", "again", "echo: again"]


@then("the MCP answer is an error saying there is no such session")
def _not_found(bot: Any, mcp_answer: Any) -> None:
    assert mcp_answer.is_error and mcp_answer.content[0].text.startswith(f"there is no session {bot.session!r}")
