"""Context building: the system prompt, a window of history, memory and RAG retrieval."""

from __future__ import annotations

from typing import ClassVar

from agentloop import (
    DEFAULT_COMPANY,
    AgentContext,
    ChatMessage,
    PromptContext,
    PromptSection,
    SanitizedInput,
    System,
    history_scope,
    TurnPolicy,
    knowledge_scope,
    memory_scope,
)
from agentloop.ports import MemoryStore, RagStore, SessionStore


def user_message_text(sanitized: SanitizedInput) -> str:
    """The user's text as the model sees it, with the names of any attached files."""
    if not sanitized.attachments:
        return sanitized.text
    names = ", ".join(f"{a.name} ({a.media_type})" for a in sanitized.attachments)
    return f"{sanitized.text}\n\n[attached: {names}]".lstrip()


class ContextBuildingSystem(System):
    """Writes the `PromptContext` the tool loop renders (order 20).

    History is `ctx.history` when the caller passed one, else the last
    `history_window` messages of the session store. Memory adds what the bot told
    this user in other sessions; RAG adds earlier answers similar to the message. Each
    is read in the session's own scope within `company_id` (the deployment).
    A turn whose `TurnPolicy` has persist=False (a task step) is not part of the
    conversation and gets no stored history; fresh_retrieval=False gets no memory or RAG.
    """

    order: ClassVar[int] = 20
    reads = (SanitizedInput,)
    optional_reads = (TurnPolicy,)
    writes = (PromptContext,)

    def __init__(
        self,
        system_prompt: str,
        *,
        sessions: SessionStore | None = None,
        history_window: int = 20,
        memory: MemoryStore | None = None,
        memory_limit: int = 5,
        rag: RagStore | None = None,
        rag_k: int = 3,
        rag_min_score: float = 0.2,
        company_id: str = DEFAULT_COMPANY,
    ) -> None:
        if history_window < 0 or memory_limit < 0 or rag_k < 0:
            raise ValueError("history_window, memory_limit and rag_k must not be negative")
        self.system_prompt = system_prompt
        self.sessions = sessions
        self.history_window = history_window
        self.memory = memory
        self.memory_limit = memory_limit
        self.rag = rag
        self.rag_k = rag_k
        self.rag_min_score = rag_min_score
        self.company_id = company_id

    async def process(self, ctx: AgentContext) -> None:
        sanitized = ctx.require(SanitizedInput)
        policy = TurnPolicy.of(ctx)
        history = ctx.history
        if not history and policy.persist and self.sessions is not None and self.history_window:
            history = await self.sessions.recent(history_scope(ctx.session, self.company_id), self.history_window)
        window = history[-self.history_window :] if self.history_window else ()
        sections = await self.retrieve(ctx, sanitized) if policy.fresh_retrieval else ()
        messages = (*window, ChatMessage.user(user_message_text(sanitized)))
        ctx.set(PromptContext(self.system_prompt, messages, sections))

    async def retrieve(self, ctx: AgentContext, sanitized: SanitizedInput) -> tuple[PromptSection, ...]:
        """Memory of this user's other sessions and RAG hits for the message."""
        sections: list[PromptSection] = []
        if self.memory is not None and self.memory_limit:
            scope = memory_scope(ctx.session, self.company_id)
            entries = await self.memory.recent(scope, self.memory_limit, exclude_session=ctx.session.id)
            if entries:
                body = "\n".join(f"- User: {e.user_text}\n  You: {e.assistant_text}" for e in entries)
                sections.append(PromptSection("What you told this user before", body, "memory"))
        if self.rag is not None and self.rag_k and sanitized.text:
            hits = [
                hit
                for hit in await self.rag.search(knowledge_scope(ctx.session, self.company_id), sanitized.text, self.rag_k)
                if hit.score >= self.rag_min_score
            ]
            if hits:
                body = "\n".join(f"- {hit.text}" for hit in hits)
                sections.append(PromptSection("Relevant earlier answers", body, "rag"))
        return tuple(sections)
