"""RAG indexing: the turn's canonical answer made retrievable by meaning, after delivery."""

from __future__ import annotations

from typing import ClassVar

from agentloop import DEFAULT_COMPANY, AgentContext, System, TurnOutcome, TurnPolicy, knowledge_scope
from agentloop.ports import RagStore


class RagIndexingSystem(System):
    """Indexes exactly `turn_outcome.assistant_text` in the turn's knowledge scope within
    `company_id` (order 75, I5); a turn whose `TurnPolicy` has persist=False (a task step)
    is not the session's conversation and is not indexed."""

    order: ClassVar[int] = 75
    reads = (TurnOutcome,)
    optional_reads = (TurnPolicy,)

    def __init__(self, rag: RagStore, *, company_id: str = DEFAULT_COMPANY) -> None:
        self.rag = rag
        self.company_id = company_id

    def should_process(self, ctx: AgentContext) -> bool:
        outcome = ctx.turn_outcome
        return outcome is not None and bool(outcome.assistant_text) and TurnPolicy.of(ctx).persist

    async def process(self, ctx: AgentContext) -> None:
        text = ctx.require(TurnOutcome).assistant_text
        if text:
            await self.rag.add(knowledge_scope(ctx.session, self.company_id), text, session_id=ctx.session.id)
