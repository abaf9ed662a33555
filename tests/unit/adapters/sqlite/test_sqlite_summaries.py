"""SqliteSummaryStore: what is particular to SQLite, the latest summary kept in memory (the port's
contract is checked by the conformance suite, tests/unit/adapters/test_store_conformance.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from agentloop.adapters.sqlite._connection import transaction_ended
from agentloop.adapters.sqlite.summaries import SqliteSummaryStore
from agentloop.ports import SessionSummary
from agentloop.scopes import Scope

ADA = Scope(user_id="ada", session_id="s1")
AT = datetime(2026, 1, 1, tzinfo=UTC)


def _summary(version: int, text: str) -> SessionSummary:
    return SessionSummary(ADA, version, version * 10, text, AT)


def _summary_reads(statements: list[str]) -> int:
    return sum("FROM session_summaries" in statement and "max(version)" not in statement for statement in statements)


def test_the_latest_summary_read_again_is_answered_from_memory_and_replaced_by_each_add(tmp_path: Path) -> None:
    store = SqliteSummaryStore.open(tmp_path / "bot.sqlite3")
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    assert store.latest(ADA) is None and store.latest(ADA) is None
    assert store.add(_summary(1, "first"))
    assert store.latest(ADA) == _summary(1, "first") and store.latest(ADA) == _summary(1, "first")
    assert _summary_reads(statements) == 1
    store.close()


def test_another_connections_summary_is_seen_at_the_next_read(tmp_path: Path) -> None:
    """A worker in another process compacting the session moves the file's data version: the kept summaries go."""
    mine, theirs = SqliteSummaryStore.open(tmp_path / "bot.sqlite3"), SqliteSummaryStore.open(tmp_path / "bot.sqlite3")
    assert mine.latest(ADA) is None
    assert theirs.add(_summary(1, "theirs"))
    assert mine.latest(ADA) == _summary(1, "theirs")
    assert mine.add(_summary(2, "mine")) and theirs.latest(ADA) == _summary(2, "mine")
    assert not theirs.add(_summary(2, "theirs again")) and mine.latest(ADA) == _summary(2, "mine")
    mine.close()
    theirs.close()


def test_a_summary_rolled_back_with_its_transaction_is_never_read(tmp_path: Path) -> None:
    """Inside a transaction the file's thread opened for several calls, an add joins it; if that
    transaction rolls back, the kept summary never shows the add."""
    store = SqliteSummaryStore.open(tmp_path / "bot.sqlite3")
    assert store.latest(ADA) is None
    store._conn.execute("BEGIN IMMEDIATE")
    assert store.add(_summary(1, "rolled back"))
    store._conn.execute("ROLLBACK")
    transaction_ended(store._conn, committed=False)
    assert store.latest(ADA) is None
    store.close()
