"""Opening a bot's SQLite database the way every embedded store expects it."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def connect(path: str | Path) -> sqlite3.Connection:
    """Open (creating if needed) a SQLite file in WAL mode with autocommit.

    `check_same_thread=False` lets the asyncio thread use a connection opened
    elsewhere; stores serialise their own writes. WAL with `synchronous=NORMAL`
    keeps a committed turn durable across a process crash at a small cost.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=5000")
    return conn
