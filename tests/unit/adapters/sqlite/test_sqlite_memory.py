"""Memory recall on SQLite: the right entries, at a cost that does not grow with the caller's own session."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop.adapters.sqlite._connection import connect
from agentloop.adapters.sqlite.memory import SqliteMemoryStore
from agentloop.ports import MemoryEntry
from agentloop.scopes import Scope

ADA = Scope("acme", "o1", user_id="ada")
BOB = Scope("acme", "o1", user_id="bob")
AT = datetime(2026, 1, 1, tzinfo=timezone.utc)


def entry(scope: Scope, session_id: str, n: int) -> MemoryEntry:
    return MemoryEntry(scope, session_id, f"q{n}", f"a{n}", AT)


@settings(max_examples=40, deadline=None)
@given(
    writes=st.lists(st.tuples(st.sampled_from([ADA, BOB]), st.sampled_from(["s1", "s2", "s3", "s4"])), max_size=40),
    limit=st.integers(0, 6),
    exclude=st.sampled_from([None, "s1", "s2", "s9"]),
)
def test_recall_is_the_newest_entries_of_the_scope_outside_the_session(
    writes: list[tuple[Scope, str]], limit: int, exclude: str | None
) -> None:
    """I11: recall returns exactly the newest `limit` entries of the caller's own scope outside
    the excluded session, oldest first, whichever sessions wrote them in whatever order."""
    store = SqliteMemoryStore.open(":memory:")
    try:
        for n, (scope, session_id) in enumerate(writes):
            store.add(entry(scope, session_id, n))
        expected = [f"a{n}" for n, (scope, session_id) in enumerate(writes) if scope == ADA and session_id != exclude]
        got = store.recent(ADA, limit, exclude_session=exclude)
        assert [e.assistant_text for e in got] == (expected[-limit:] if limit else [])
        assert all(e.scope == ADA for e in got)
    finally:
        store.close()


def _recall_steps(store: SqliteMemoryStore, conn_steps: list[int]) -> int:
    conn_steps.clear()
    store.recent(ADA, 5, exclude_session="current")
    return len(conn_steps)


def test_recall_reads_as_much_at_turn_2000_of_a_session_as_at_turn_20(tmp_path: Path) -> None:
    conn = connect(tmp_path / "memory.sqlite3")
    store = SqliteMemoryStore(conn)
    try:
        for n in range(8):
            store.add(entry(ADA, f"earlier-{n % 3}", n))
        steps: list[int] = []
        conn.set_progress_handler(lambda: steps.append(1), 1)  # counts SQLite VM instructions (None: go on)
        for n in range(20):
            store.add(entry(ADA, "current", n))
        early = _recall_steps(store, steps)
        for n in range(2000):
            store.add(entry(ADA, "current", n))
        late = _recall_steps(store, steps)
        assert late == early
        assert [e.assistant_text for e in store.recent(ADA, 5, exclude_session="current")] == ["a3", "a4", "a5", "a6", "a7"]
    finally:
        store.close()
