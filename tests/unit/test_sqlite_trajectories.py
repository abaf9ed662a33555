"""SqliteTrajectoryStore: what is particular to SQLite (the port's contract is checked by the
conformance suite, tests/unit/test_store_conformance.py; migrating release 0.1 files by
test_sqlite_schema.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agentloop.adapters import SqliteTrajectoryStore


def test_the_database_uses_wal(tmp_path: Path) -> None:
    SqliteTrajectoryStore(tmp_path / "t.db")
    (mode,) = sqlite3.connect(tmp_path / "t.db").execute("PRAGMA journal_mode").fetchone()
    assert mode == "wal"
