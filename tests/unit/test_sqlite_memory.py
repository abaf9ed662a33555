"""SqliteMemoryStore: entries per scope, newest window, one session excluded on request."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from agentloop.adapters import SqliteMemoryStore
from agentloop.ports import MemoryEntry
from agentloop.scopes import Scope

U1, U2 = Scope(user_id="1"), Scope(user_id="2")


def entry(scope: Scope, session: str, n: int) -> MemoryEntry:
    return MemoryEntry(scope, session, f"q{n}", f"a{n}", datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=n))


def test_recent_entries_of_a_scope_oldest_first(tmp_path: Path) -> None:
    store = SqliteMemoryStore.open(tmp_path / "bot.sqlite3")
    for n in range(5):
        store.add(entry(U1, "s1" if n < 3 else "s2", n))
    store.add(entry(U2, "s9", 9))
    assert [e.assistant_text for e in store.recent(U1, 3)] == ["a2", "a3", "a4"]
    assert [e.assistant_text for e in store.recent(U1, 10, exclude_session="s2")] == ["a0", "a1", "a2"]
    assert store.recent(U1, 1)[0] == entry(U1, "s2", 4)
    assert store.recent(Scope(user_id="nobody"), 5) == ()
    store.close()


def test_entries_survive_reopening(tmp_path: Path) -> None:
    first = SqliteMemoryStore.open(tmp_path / "bot.sqlite3")
    first.add(entry(U1, "s1", 1))
    first.close()
    assert SqliteMemoryStore.open(tmp_path / "bot.sqlite3").recent(U1, 5) == (entry(U1, "s1", 1),)
