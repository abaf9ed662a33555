"""SqliteSessionStore: what is particular to SQLite (the port's contract is checked by the
conformance suite, tests/unit/test_store_conformance.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agentloop import ChatMessage
from agentloop.adapters import SqliteSessionStore
from agentloop.scopes import Scope


def test_history_is_kept_in_a_wal_database_made_on_first_use(tmp_path: Path) -> None:
    path = tmp_path / "bot.sqlite3"
    store = SqliteSessionStore.open(path)
    store.append(Scope(session_id="s1"), [ChatMessage.user("hi")])
    store.close()
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone() == ("wal",)
