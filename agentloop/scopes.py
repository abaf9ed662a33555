"""Which stored data a turn may see: one rule shared by every system that stores or reads."""

from __future__ import annotations

from agentloop.context import Session


def memory_scope(session: Session) -> str:
    """Memory belongs to a user (or, without one, to the session)."""
    return f"user:{session.user_id}" if session.user_id else f"session:{session.id}"


def knowledge_scope(session: Session) -> str:
    """Indexed answers are shared within a project, else kept per user, else per session."""
    if session.project_id:
        return f"project:{session.project_id}"
    return memory_scope(session)
