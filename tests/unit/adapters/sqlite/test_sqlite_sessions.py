"""SqliteSessionStore: what is particular to SQLite (the port's contract is checked by the
conformance suite, tests/unit/adapters/test_store_conformance.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop import ChatMessage, ToolCall
from agentloop.adapters import SqliteSessionStore
from agentloop.adapters.sqlite._connection import transaction_ended
from agentloop.scopes import Scope


def test_history_is_kept_in_a_wal_database_made_on_first_use(tmp_path: Path) -> None:
    path = tmp_path / "bot.sqlite3"
    store = SqliteSessionStore.open(path)
    store.append(Scope(session_id="s1"), [ChatMessage.user("hi")])
    store.close()
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone() == ("wal",)


ADA = Scope(user_id="ada", session_id="s1")
TOOL_CALL = ChatMessage.assistant(None, (ToolCall("c1", "search", {"q": "hours"}),))


def _history_reads(statements: list[str]) -> int:
    return sum("FROM session_messages" in statement for statement in statements)


def test_a_history_window_read_again_is_answered_from_memory_and_grows_with_each_append(tmp_path: Path) -> None:
    store = SqliteSessionStore.open(tmp_path / "bot.sqlite3")
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    store.append(ADA, [ChatMessage.user("one"), ChatMessage.assistant("two")])
    assert store.recent(ADA, 4) == (ChatMessage.user("one"), ChatMessage.assistant("two"))
    store.append(ADA, [ChatMessage.user("three"), ChatMessage.assistant("four"), ChatMessage.user("five")])
    assert store.recent(ADA, 4) == tuple(ChatMessage.assistant(t) if i % 2 else ChatMessage.user(t) for i, t in enumerate(["two", "three", "four", "five"], 1))
    assert store.recent(ADA, 2) == (ChatMessage.assistant("four"), ChatMessage.user("five"))
    assert _history_reads(statements) == 1
    store.append(ADA, [TOOL_CALL])  # a message read back through JSON: the next read asks the file
    assert store.recent(ADA, 4)[-1] == TOOL_CALL
    assert store.recent(ADA, 10)[0] == ChatMessage.user("one")  # a larger window than kept asks too
    assert _history_reads(statements) == 3
    store.close()


def test_another_connections_append_is_seen_at_the_next_read(tmp_path: Path) -> None:
    """Another process writing the same history (a worker taking the session's next
    message) moves the file's data version, and the kept windows are dropped."""
    mine, theirs = SqliteSessionStore.open(tmp_path / "bot.sqlite3"), SqliteSessionStore.open(tmp_path / "bot.sqlite3")
    mine.append(ADA, [ChatMessage.user("mine")])
    assert mine.recent(ADA, 10) == (ChatMessage.user("mine"),)
    theirs.append(ADA, [ChatMessage.user("theirs")])
    assert mine.recent(ADA, 10) == (ChatMessage.user("mine"), ChatMessage.user("theirs"))
    mine.close()
    theirs.close()


def test_an_append_rolled_back_with_its_transaction_is_never_read(tmp_path: Path) -> None:
    """Inside a transaction the file's thread opened for several calls, an append joins it;
    if that transaction rolls back, the kept window never shows the append."""
    store = SqliteSessionStore.open(tmp_path / "bot.sqlite3")
    store.append(ADA, [ChatMessage.user("kept")])
    assert store.recent(ADA, 10) == (ChatMessage.user("kept"),)
    for committed in (False, True):
        store._conn.execute("BEGIN IMMEDIATE")
        store.append(ADA, [ChatMessage.user(f"committed: {committed}")])
        store._conn.execute("COMMIT" if committed else "ROLLBACK")
        transaction_ended(store._conn, committed=committed)
    assert store.recent(ADA, 10) == (ChatMessage.user("kept"), ChatMessage.user("committed: True"))
    store.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.sampled_from(["s1", "s2"]), st.lists(st.sampled_from(["hi", "ok", None, "tool"]), min_size=1, max_size=3)),
            st.tuples(st.just("read"), st.sampled_from(["s1", "s2"]), st.integers(-1, 8)),
        ),
        max_size=30,
    )
)
def test_reads_answered_from_memory_equal_reads_of_the_file(tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[Any, ...]]) -> None:
    path = tmp_path_factory.mktemp("tails") / "bot.sqlite3"
    store = SqliteSessionStore.open(path)
    fresh = sqlite3.connect(path)
    try:
        for action, session, argument in steps:
            scope = Scope(user_id="ada", session_id=session)
            if action == "append":
                store.append(scope, [TOOL_CALL if text == "tool" else ChatMessage.assistant(text) for text in argument])
            else:
                reader = SqliteSessionStore(fresh)  # no window kept: every read asks the file
                assert store.recent(scope, argument) == reader.recent(scope, argument)
    finally:
        store.close()
        fresh.close()
