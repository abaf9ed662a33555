"""The bot the chat page's browser test serves: the standard pipeline with one tool that needs approval."""

from __future__ import annotations

from agentloop import tool
from agentloop.ports import LLM, Channel, Stores
from systems import StandardPipeline, standard_pipeline


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete one of the user's files."""
    return f"deleted {path}"


def factory(llm: LLM, channel: Channel, stores: Stores) -> StandardPipeline:
    return standard_pipeline(llm, channel, stores=stores, tools=[delete_file])
