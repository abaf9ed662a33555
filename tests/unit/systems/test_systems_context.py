"""ContextBuildingSystem: the prompt the tool loop renders, from history, memory and RAG."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from agentloop import Attachment, ChatMessage, PromptContext, SanitizedInput, Session, history_scope
from agentloop.adapters import HashingEmbedder, open_stores
from agentloop.ports import MemoryEntry
from agentloop.tasks import TaskTurn
from agentloop.testing import make_context, run_system_sync
from agentloop.scopes import Scope
from systems import ContextBuildingSystem

ADA = Scope(user_id="ada")  # memory and indexed answers of user ada, who has no org

SESSION = Session("s2", user_id="ada")
HISTORY = history_scope(SESSION)


def test_prompt_has_history_window_memory_from_other_sessions_and_rag(tmp_path: Path) -> None:
    stores = open_stores(tmp_path, embedder=HashingEmbedder(dim=128))
    asyncio.run(stores.sessions.append(HISTORY, [ChatMessage.user(f"m{i}") for i in range(5)]))
    at = datetime(2026, 1, 1, tzinfo=UTC)
    asyncio.run(stores.memory.add(MemoryEntry(ADA, "s1", "favourite colour?", "You said blue.", at)))
    asyncio.run(stores.memory.add(MemoryEntry(ADA, "s2", "same session", "not repeated", at)))
    asyncio.run(stores.rag.add(ADA, "The office opens at eight in the morning"))
    asyncio.run(stores.rag.add(Scope(user_id="bob"), "The office of bob opens at nine"))
    system = ContextBuildingSystem("You help.", sessions=stores.sessions, history_window=3, memory=stores.memory,
                                   rag=stores.rag)
    ctx = make_context(session=SESSION, components=[SanitizedInput("when does the office open")])
    run_system_sync(system, ctx)
    prompt = ctx.require(PromptContext)
    assert [m.content for m in prompt.messages] == ["m2", "m3", "m4", "when does the office open"]
    sections = {s.source: s.body for s in prompt.sections}
    assert sections["memory"] == "- User: favourite colour?\n  You: You said blue."
    assert sections["rag"] == "- The office opens at eight in the morning"
    assert prompt.to_messages()[0].content.startswith("You help.\n\n## ")
    stores.close()


def test_caller_history_wins_and_attachments_are_named() -> None:
    ctx = make_context(session=SESSION, history=[ChatMessage.user("earlier")],
                       components=[SanitizedInput("see file", (Attachment("r.pdf", "application/pdf"),))])
    run_system_sync(ContextBuildingSystem("sys"), ctx)
    prompt = ctx.require(PromptContext)
    assert prompt.messages == (ChatMessage.user("earlier"), ChatMessage.user("see file\n\n[attached: r.pdf (application/pdf)]"))
    assert prompt.sections == ()


def _task_prompt(tmp_path: Path, fresh: bool) -> PromptContext:
    stores = open_stores(tmp_path, embedder=HashingEmbedder(dim=128))
    asyncio.run(stores.sessions.append(HISTORY, [ChatMessage.user("an earlier chat message")]))
    asyncio.run(stores.memory.add(MemoryEntry(ADA, "s1", "favourite colour?", "You said blue.", datetime(2026, 1, 1, tzinfo=UTC))))
    asyncio.run(stores.rag.add(ADA, "The office opens at eight in the morning"))
    system = ContextBuildingSystem("sys", sessions=stores.sessions, memory=stores.memory, rag=stores.rag)
    turn = TaskTurn("opening-hours", "when does the office open", fresh_context=fresh)
    ctx = make_context(session=SESSION, components=[turn.policy, SanitizedInput("when does the office open")])
    run_system_sync(system, ctx)
    stores.close()
    return ctx.require(PromptContext)


def test_a_task_turn_without_fresh_context_gets_no_history_memory_or_rag(tmp_path: Path) -> None:
    prompt = _task_prompt(tmp_path, fresh=False)
    assert prompt.messages == (ChatMessage.user("when does the office open"),)
    assert prompt.sections == ()


def test_a_task_turn_with_fresh_context_gets_memory_and_rag_but_no_chat_history(tmp_path: Path) -> None:
    prompt = _task_prompt(tmp_path, fresh=True)
    assert prompt.messages == (ChatMessage.user("when does the office open"),)
    assert {s.source for s in prompt.sections} == {"memory", "rag"}
