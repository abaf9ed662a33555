"""Context building: the system prompt, the session's summary, memory, RAG and as much history as
the token budget leaves (`agentloop.compaction.ContextBudget`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from agentloop import (
    DEFAULT_COMPANY,
    AgentContext,
    ChatMessage,
    PromptContext,
    PromptSection,
    SanitizedInput,
    System,
    ToolSpec,
    history_scope,
    TurnPolicy,
    knowledge_scope,
    memory_scope,
)
from agentloop._log import get_logger
from agentloop.compaction import SUMMARY_TITLE, ContextBudget, UnsummarisedHistory, section_tokens, tail_start, trim_section
from agentloop.ports import MemoryStore, RagStore, SessionStore, SummaryStore
from agentloop.tokens import MESSAGE_OVERHEAD, EstimatedTokens, TokenCounter, message_tokens, texts_tokens, tool_texts

_log = get_logger("agentloop.context")


def user_message_text(sanitized: SanitizedInput) -> str:
    """The user's text as the model sees it, with the names of any attached files."""
    if not sanitized.attachments:
        return sanitized.text
    names = ", ".join(f"{a.name} ({a.media_type})" for a in sanitized.attachments)
    return f"{sanitized.text}\n\n[attached: {names}]".lstrip()


class ContextBuildingSystem(System):
    """Writes the `PromptContext` the tool loop renders (order 20), within a token budget.

    The system prompt, the `tools` the model is sent and the user's message always go in;
    the session's summary (`summaries`), memory of this user's other sessions and RAG hits
    each take at most their share of `budget` (or of the budget a function given instead returns, asked
    once, at the first turn), and history what is left: the newest whole
    turns after the summary that fit, at most `history_window` messages. History is
    `ctx.history` when the caller passed one. Tokens are counted by `counter` (a calibrated
    estimate unless given). Each store is read in the session's own scope within `company_id`.
    A turn whose `TurnPolicy` has persist=False (a task step) is not part of the
    conversation and gets no stored history; fresh_retrieval=False gets no memory or RAG.
    With history read from `sessions`, it says what it read (`UnsummarisedHistory`) for compaction.
    """

    order: ClassVar[int] = 20
    reads = (SanitizedInput,)
    optional_reads = (TurnPolicy,)
    writes = (PromptContext, UnsummarisedHistory)

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
        budget: ContextBudget | Callable[[], ContextBudget] = ContextBudget(),
        counter: TokenCounter | None = None,
        summaries: SummaryStore | None = None,
        tools: Sequence[ToolSpec] = (),
        model: str | None = None,
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
        self._budget = budget
        self.counter = counter or EstimatedTokens()
        self.summaries = summaries
        self.tools = tuple(tools)
        self._tool_texts = tool_texts(self.tools)
        self.model = model

    @property
    def budget(self) -> ContextBudget:
        """The token budget; a function given for it is asked on first use (after a start-up check read the window)."""
        if not isinstance(self._budget, ContextBudget):
            self._budget = self._budget()
        return self._budget

    async def process(self, ctx: AgentContext) -> None:
        sanitized = ctx.require(SanitizedInput)
        policy = TurnPolicy.of(ctx)
        current = ChatMessage.user(user_message_text(sanitized))
        history, summary, stored = ctx.history, None, False
        if not history and policy.persist and self.sessions is not None and self.history_window:
            history, summary = await self.stored_history(ctx, self.sessions)
            stored = True
        retrieved = await self.retrieve(ctx, sanitized) if policy.fresh_retrieval else ()
        room = self.budget.prompt - self.fixed_tokens(current) - self.budget.share(self.budget.notes)
        sections = []
        for section in (summary, *retrieved):
            if section is None:
                continue
            share = {"summary": self.budget.summary, "memory": self.budget.memory}.get(section.source, self.budget.rag)
            fitted = trim_section(self.counter, section, min(room, self.budget.share(share)), self.model)
            if fitted is not None:
                sections.append(fitted)
                room -= section_tokens(self.counter, fitted, self.model)
        window = history[-self.history_window :] if self.history_window else ()
        sizes = [message_tokens(self.counter, m, self.model) for m in window]
        start = tail_start(window, sizes, room)
        if start:
            _log.info("context.history_cut", session_id=ctx.session.id, dropped=start, kept=len(window) - start)
        if stored:
            ctx.set(UnsummarisedHistory(len(window), sum(sizes), complete=len(window) < self.history_window))
        ctx.set(PromptContext(self.system_prompt, (*window[start:], current), tuple(sections)))

    async def stored_history(self, ctx: AgentContext, sessions: SessionStore) -> tuple[tuple[ChatMessage, ...], PromptSection | None]:
        """The session's summary and the history after it, at most `history_window` messages."""
        scope = history_scope(ctx.session, self.company_id)
        latest = await self.summaries.latest(scope) if self.summaries is not None else None
        if latest is None:
            return await sessions.recent(scope, self.history_window), None
        limit = min(self.history_window, await sessions.count(scope) - latest.covered)
        history = await sessions.recent(scope, limit) if limit > 0 else ()
        return history, PromptSection(SUMMARY_TITLE, latest.text, "summary")

    def fixed_tokens(self, current: ChatMessage) -> int:
        """What every prompt sends whatever the budget: the system message, the tool specs, the user's message."""
        return (
            MESSAGE_OVERHEAD + self.counter.count(self.system_prompt, self.model)
            + texts_tokens(self.counter, self._tool_texts, self.model) + message_tokens(self.counter, current, self.model)
        )

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
