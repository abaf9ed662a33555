"""A model held on its first call, and the tool it asks for: a message can arrive while a turn waits."""

from __future__ import annotations

import asyncio

from agentloop import LlmReply, LlmRequest, Role, Tool, tool
from agentloop.testing import ScriptedLLM


class HeldModel:
    """A model whose first call waits for `release`, asking for the `lookup` tool after saying a few words;
    every later call answers with the user messages it was shown."""

    def __init__(self) -> None:
        self.called = asyncio.Event()
        self.release = asyncio.Event()
        self.requests: list[LlmRequest] = []

    async def complete(self, request: LlmRequest) -> LlmReply:
        self.requests.append(request)
        if len(self.requests) == 1:
            self.called.set()
            await self.release.wait()
            return LlmReply(content="Let me look that up", tool_calls=(ScriptedLLM.tool_call("lookup").tool_calls[0],))
        users = [m.content for m in request.messages if m.role is Role.USER]
        return LlmReply(content=f"answering {' + '.join(str(u) for u in users)}")


def lookup_tool(looked: list[str]) -> Tool:
    """The `lookup` tool the held model asks for; each run is noted in `looked`."""

    @tool
    def lookup() -> str:
        """Look something up."""
        looked.append("ran")
        return "found"

    return lookup
