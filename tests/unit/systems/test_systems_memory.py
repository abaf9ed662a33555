"""MemoryPersistSystem: exactly the canonical exchange into history and memory (I5)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from delivery_ledger import Ledger
from agentloop import ChatMessage, FinishReason, InboxTurn, OutgoingResponse, SanitizedInput, Session, TurnOutcome, history_scope
from agentloop.adapters import HashingEmbedder, open_stores
from agentloop.tasks import TaskTurn
from agentloop.testing import make_context, run_system_sync
from agentloop.scopes import Scope
from systems import MemoryPersistSystem

ADA = Scope(user_id="ada")  # memory and indexed answers of user ada, who has no org

SESSION = Session("s1", user_id="ada")
HISTORY = history_scope(SESSION)


def answered(text: str | None, *, fallback: bool = False) -> TurnOutcome:
    return TurnOutcome(
        FinishReason.SUCCESS if text else FinishReason.ERROR,
        assistant_text=text,
        outgoing_response=OutgoingResponse.text_only(text or "Sorry, try again."),
        fallback=fallback,
    )


def test_history_and_memory_get_the_sanitized_message_and_the_canonical_answer(tmp_path: Path) -> None:
    stores = open_stores(tmp_path, embedder=HashingEmbedder(dim=32))
    ctx = make_context(" hi ", session=SESSION, components=[SanitizedInput("hi"), answered("Hello!")])
    run_system_sync(MemoryPersistSystem(sessions=stores.sessions, memory=stores.memory), ctx)
    assert asyncio.run(stores.sessions.recent(HISTORY, 10)) == (ChatMessage.user("hi"), ChatMessage.assistant("Hello!"))
    (entry,) = asyncio.run(stores.memory.recent(ADA, 10))
    assert (entry.user_text, entry.assistant_text) == ("hi", "Hello!")
    assert ctx.require(TurnOutcome).raw_history_written
    stores.close()


def test_a_fallback_is_never_stored(tmp_path: Path) -> None:
    """I5: the fallback text a user saw is not history and not memory."""
    stores = open_stores(tmp_path, embedder=HashingEmbedder(dim=32))
    ctx = make_context("hi", session=SESSION, components=[answered(None, fallback=True)])
    run_system_sync(MemoryPersistSystem(sessions=stores.sessions, memory=stores.memory), ctx)
    assert asyncio.run(stores.sessions.recent(HISTORY, 10)) == (ChatMessage.user("hi"),)
    assert asyncio.run(stores.memory.recent(ADA, 10)) == ()
    stores.close()


def test_a_task_turn_is_stored_nowhere(tmp_path: Path) -> None:
    stores = open_stores(tmp_path, embedder=HashingEmbedder(dim=32))
    turn = TaskTurn("summarize", "Summarize the report")
    ctx = make_context("Summarize the report", session=SESSION, auto_mode=True,
                       components=[turn.policy, TurnOutcome(FinishReason.SUCCESS, assistant_text="Done.", auto_mode=True)])
    assert run_system_sync(MemoryPersistSystem(sessions=stores.sessions, memory=stores.memory), ctx) is False
    assert asyncio.run(stores.sessions.recent(HISTORY, 10)) == () and asyncio.run(stores.memory.recent(ADA, 10)) == ()
    stores.close()


def test_a_worker_turn_run_again_for_one_message_writes_history_and_memory_once(tmp_path: Path) -> None:
    """I13: the message id keys the append and the memory add, so a re-run after a lost worker stores nothing twice."""
    stores = open_stores(tmp_path, embedder=HashingEmbedder(dim=32))
    for run in (1, 2):
        turn = InboxTurn("message-7", run, Ledger())
        ctx = make_context("hi", session=SESSION, components=[SanitizedInput("hi"), answered("Hello!"), turn])
        run_system_sync(MemoryPersistSystem(sessions=stores.sessions, memory=stores.memory), ctx)
        assert ctx.require(TurnOutcome).raw_history_written
    assert asyncio.run(stores.sessions.recent(HISTORY, 10)) == (ChatMessage.user("hi"), ChatMessage.assistant("Hello!"))
    assert len(asyncio.run(stores.memory.recent(ADA, 10))) == 1
    stores.close()


def test_one_message_id_in_two_sessions_of_a_user_stores_a_memory_entry_for_each(tmp_path: Path) -> None:
    """Memory spans a user's sessions, and a client may number each session's messages alike: the
    memory key is the message id within its history scope, so neither entry is lost."""
    stores = open_stores(tmp_path, embedder=HashingEmbedder(dim=32))
    for session in (SESSION, Session("s2", user_id="ada")):
        ctx = make_context("hi", session=session, components=[SanitizedInput("hi"), answered("Hello!"), InboxTurn("1", 1, Ledger())])
        run_system_sync(MemoryPersistSystem(sessions=stores.sessions, memory=stores.memory), ctx)
    assert [e.session_id for e in asyncio.run(stores.memory.recent(ADA, 10))] == ["s1", "s2"]
    stores.close()
