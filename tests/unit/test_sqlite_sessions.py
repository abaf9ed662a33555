"""SqliteSessionStore: history per session, in order, durable across connections."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import ChatMessage, Session, ToolCall, history_scope
from agentloop.adapters import SqliteSessionStore
from agentloop.scopes import Scope

S1, S2 = Scope(user_id="ada", session_id="s1"), Scope(user_id="ada", session_id="s2")


def test_schema_on_first_use_wal_and_window(tmp_path: Path) -> None:
    path = tmp_path / "bot.sqlite3"
    store = SqliteSessionStore.open(path)
    assert store.recent(S1, 10) == ()
    messages = [ChatMessage.user(f"q{i}") if i % 2 == 0 else ChatMessage.assistant(f"a{i}") for i in range(6)]
    store.append(S1, messages[:3])
    store.append(S2, [ChatMessage.user("other")])
    store.append(S1, messages[3:])
    assert store.recent(S1, 4) == tuple(messages[2:])
    assert store.recent(S2, 10) == (ChatMessage.user("other"),)
    store.close()
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_tool_messages_round_trip_through_a_new_connection(tmp_path: Path) -> None:
    path = tmp_path / "bot.sqlite3"
    call = ToolCall("c1", "search", {"q": "x", "n": [1, 2]})
    messages = [ChatMessage.assistant(None, (call,)), ChatMessage.tool("c1", "search", "found")]
    first = SqliteSessionStore.open(path)
    first.append(S1, messages)
    first.close()
    assert SqliteSessionStore.open(path).recent(S1, 5) == tuple(messages)


@settings(deadline=None, max_examples=25)
@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.text(max_size=20)), max_size=15), st.integers(0, 20))
def test_recent_is_the_tail_of_what_was_appended(appended: list[tuple[str, str]], limit: int) -> None:
    """History keeps insertion order per session (what I5 relies on to read back the canonical text)."""
    store = SqliteSessionStore(sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None))
    for session_id, text in appended:
        store.append(Scope(session_id=session_id), [ChatMessage.user(text)])
    for session_id in ("a", "b"):
        mine = [ChatMessage.user(t) for s, t in appended if s == session_id]
        assert store.recent(Scope(session_id=session_id), limit) == tuple(mine[-limit:] if limit else [])
    store.close()


def test_new_history_of_a_repeated_session_id_stays_with_its_user(tmp_path: Path) -> None:
    store = SqliteSessionStore.open(tmp_path / "bot.sqlite3")
    store.append(history_scope(Session("s", user_id="ada")), [ChatMessage.user("ada's secret")])
    for other in (Session("s", user_id="bob"), Session("s"), Session("s", user_id="ada", org_id="acme")):
        assert store.recent(history_scope(other), 10) == ()
    assert store.recent(history_scope(Session("s", user_id="ada")), 10) == (ChatMessage.user("ada's secret"),)
    store.close()


def test_a_keyed_append_is_applied_once_per_history_scope(tmp_path: Path) -> None:
    """I13: a turn run again with the same message id writes its history once, in its own chain only."""
    store = SqliteSessionStore.open(tmp_path / "bot.sqlite3")
    turn = [ChatMessage.user("hi"), ChatMessage.assistant("hello")]
    other_org = Scope(org_id="globex", user_id="ada", session_id="s1")
    assert store.append(S1, turn, key="m1") is True
    assert store.append(S1, turn, key="m1") is False
    assert store.append(other_org, turn, key="m1") is True, "the same id in another chain is another message"
    assert store.append(S1, [ChatMessage.user("again")], key="m2") is True
    assert store.append(S1, [ChatMessage.user("unkeyed")]) is True
    store.close()
    reopened = SqliteSessionStore.open(tmp_path / "bot.sqlite3")
    assert reopened.append(S1, turn, key="m1") is False, "keys outlive the process"
    assert [m.content for m in reopened.recent(S1, 10)] == ["hi", "hello", "again", "unkeyed"]
    assert [m.content for m in reopened.recent(other_org, 10)] == ["hi", "hello"]
    reopened.close()
