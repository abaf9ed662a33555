"""The bot the OpenAI API tests serve (`--pipeline openai_kit:bot`): it echoes what it was told, with what came before,
reports its token usage, and deletes files only with the user's approval."""

from __future__ import annotations

from agentloop import LlmReply, LlmRequest, Role
from agentloop.messages import Usage
from agentloop.ports import Channel, Stores
from agentloop.testing import ScriptedLLM
from serve_kit import delete_file
from systems import StandardPipeline, standard_pipeline

USAGE = Usage(12, 3, cache_read_tokens=2)
"""What the model reports for each of its answers."""


def answer(request: LlmRequest) -> LlmReply:
    """"delete PATH" asks for `delete_file`; a tool result is told back; anything else is echoed after the earlier
    messages (all but the bot's own system prompt), as "echo: TEXT (after A / B)"."""
    last = request.messages[-1]
    if last.role is Role.TOOL:
        return LlmReply(f"the tool said: {last.content}", usage=USAGE)
    text = last.content or ""
    if text.startswith("delete "):
        return ScriptedLLM.tool_call("delete_file", {"path": text.removeprefix("delete ")})
    earlier = [message.content or "" for message in request.messages[1:-1] if message.role is not Role.TOOL]
    return LlmReply(f"echo: {text}" + (f" (after {' / '.join(earlier)})" if earlier else ""), usage=USAGE)


def bot(channel: Channel, stores: Stores) -> StandardPipeline:
    """The standard bot with `answer` as its model (streaming four characters at a time) and `delete_file`."""
    return standard_pipeline(ScriptedLLM(answer, chunk=4), channel, stores=stores, tools=[delete_file])
