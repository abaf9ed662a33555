"""Memory persistence: the turn's exchange into history and long-term memory, after delivery."""

from __future__ import annotations

import hashlib
from typing import ClassVar

import attrs

from agentloop import (
    DEFAULT_COMPANY,
    AgentContext,
    ChatMessage,
    FinishReason,
    InboxTurn,
    SanitizedInput,
    Scope,
    System,
    TurnOutcome,
    TurnPolicy,
    history_scope,
    memory_scope,
    resolve_finish_reason,
)
from agentloop.ports import MemoryEntry, MemoryStore, SessionStore

from systems.input import turn_user_text


class MemoryPersistSystem(System):
    """Stores exactly what the turn said (order 70), once the outcome is final.

    History gets the user's message and `turn_outcome.assistant_text` (never a
    fallback text: fallback outcomes have no assistant text, I5); memory gets one
    entry per answered turn. It sets `raw_history_written` on the outcome. A turn whose
    `TurnPolicy` has persist=False (a task step: its prompt is rebuilt from the task's
    own context each time, and it is not something the user said) is stored nowhere.
    Rows are stored in the session's scopes within `company_id` (the deployment). A
    worker's turn (`InboxTurn`) writes both under keys made from its message id, so a
    turn run again after a lost worker or a failed write stores each exactly once; a turn
    held back for another run after an outage (`InboxTurn.runs_again`) stores nothing.
    A write that fails makes the outcome `writes_lost` and no SUCCESS (I15), and is raised
    for the loop to record.
    """

    order: ClassVar[int] = 70
    reads = (TurnOutcome, SanitizedInput)
    optional_reads = (TurnPolicy, InboxTurn)
    writes = (TurnOutcome,)

    def __init__(
        self,
        *,
        sessions: SessionStore | None = None,
        memory: MemoryStore | None = None,
        company_id: str = DEFAULT_COMPANY,
    ) -> None:
        self.sessions = sessions
        self.memory = memory
        self.company_id = company_id

    def should_process(self, ctx: AgentContext) -> bool:
        outcome = ctx.turn_outcome
        if outcome is None or not TurnPolicy.of(ctx).persist:
            return False
        inbox = ctx.get(InboxTurn)
        return inbox is None or not inbox.runs_again(outcome, ctx.failures)

    async def process(self, ctx: AgentContext) -> None:
        outcome = ctx.require(TurnOutcome)
        try:
            await self._store(ctx, outcome)
        except Exception:  # the turn's writes did not land: no success (I15); the loop records the failure
            outcome = ctx.require(TurnOutcome)
            ctx.set(attrs.evolve(
                outcome, finish_reason=resolve_finish_reason((outcome.finish_reason, FinishReason.ERROR)), writes_lost=True
            ))
            raise

    async def _store(self, ctx: AgentContext, outcome: TurnOutcome) -> None:
        user_text = turn_user_text(ctx)
        assistant_text = outcome.assistant_text
        inbox = ctx.get(InboxTurn)
        history = history_scope(ctx.session, self.company_id)
        if self.sessions is not None:
            messages = exchange_messages(user_text, assistant_text)
            await self.sessions.append(history, messages, key=None if inbox is None else inbox.message_id)
            ctx.set(attrs.evolve(outcome, raw_history_written=True))
        if self.memory is not None and assistant_text:
            await self.memory.add(
                MemoryEntry(
                    memory_scope(ctx.session, self.company_id), ctx.session.id, user_text, assistant_text, ctx.clock.now()
                ),
                key=None if inbox is None else memory_key(history, inbox.message_id),
            )


def exchange_messages(user_text: str, assistant_text: str | None) -> list[ChatMessage]:
    """What a turn adds to its history: the user's message, and the answer when there is one."""
    return [ChatMessage.user(user_text)] + ([ChatMessage.assistant(assistant_text)] if assistant_text else [])


def memory_key(history: Scope, message_id: str) -> str:
    """The key of a worker turn's memory entry: its message id within its history scope.

    A memory scope spans a user's sessions in an org, where one message id may name a
    message of each session; the digest of the history scope keeps them apart, in a key
    of bounded length."""
    return f"{message_id} {hashlib.sha256(history.key.encode()).hexdigest()[:32]}"
