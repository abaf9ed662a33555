"""SqliteMemoryStore: entries per scope, newest window, one session excluded on request."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from agentloop.adapters import SqliteMemoryStore
from agentloop.ports import MemoryEntry


def entry(scope: str, session: str, n: int) -> MemoryEntry:
    return MemoryEntry(scope, session, f"q{n}", f"a{n}", datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=n))


def test_recent_entries_of_a_scope_oldest_first(tmp_path: Path) -> None:
    store = SqliteMemoryStore.open(tmp_path / "bot.sqlite3")
    for n in range(5):
        store.add(entry("user:1", "s1" if n < 3 else "s2", n))
    store.add(entry("user:2", "s9", 9))
    assert [e.assistant_text for e in store.recent("user:1", 3)] == ["a2", "a3", "a4"]
    assert [e.assistant_text for e in store.recent("user:1", 10, exclude_session="s2")] == ["a0", "a1", "a2"]
    assert store.recent("user:1", 1)[0] == entry("user:1", "s2", 4)
    assert store.recent("nobody", 5) == ()
    store.close()


def test_entries_survive_reopening(tmp_path: Path) -> None:
    first = SqliteMemoryStore.open(tmp_path / "bot.sqlite3")
    first.add(entry("user:1", "s1", 1))
    first.close()
    assert SqliteMemoryStore.open(tmp_path / "bot.sqlite3").recent("user:1", 5) == (entry("user:1", "s1", 1),)
