"""Several bots working together: a bot asked as a tool of another (`agent_tool`), and a
conversation handed from one bot to another (`Handoffs`)."""

from agentloop.agents.handoff import HISTORY_SCANNED, HandoffError, Handoffs, HistoryFilter, handoff_line
from agentloop.agents.tool import (
    DEFAULT_MAX_CALLS,
    DEFAULT_MAX_DEPTH,
    AgentToolError,
    BotSource,
    Builder,
    agent_tool,
    child_session,
)

__all__ = [
    "DEFAULT_MAX_CALLS",
    "DEFAULT_MAX_DEPTH",
    "HISTORY_SCANNED",
    "AgentToolError",
    "BotSource",
    "Builder",
    "HandoffError",
    "Handoffs",
    "HistoryFilter",
    "agent_tool",
    "child_session",
    "handoff_line",
]
