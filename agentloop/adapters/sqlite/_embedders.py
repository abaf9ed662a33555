"""Which embedder made the vectors of a SQLite file: one row per vector table, written when
the first store opens it and checked by every later open, and how to re-embed a table."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

import numpy as np

from agentloop.adapters.embedders.hashing import hashing_name
from agentloop.adapters.sqlite._connection import transaction
from agentloop.adapters.sqlite.schema import Step, file_of
from agentloop.adapters.errors import EmbedderMismatchError
from agentloop.ports.vectors import Embedder, Vectors

_TABLE = "CREATE TABLE IF NOT EXISTS vector_embedders (vectors TEXT PRIMARY KEY, name TEXT NOT NULL, dim INTEGER NOT NULL)"


def record_step(table: str, column: str) -> Step:
    """The schema step that gives `table` its embedder record. Vectors stored before there
    was one were made by the default HashingEmbedder of their dimension (the only embedder
    then); a table still empty gets the embedder of the first store that opens it."""

    def run(conn: sqlite3.Connection) -> None:
        conn.execute(_TABLE)
        row = conn.execute(f"SELECT length({column}) FROM {table} LIMIT 1").fetchone()
        if row is not None:
            dim = row[0] // 4
            conn.execute("INSERT OR IGNORE INTO vector_embedders VALUES (?, ?, ?)", (table, hashing_name(dim), dim))

    return Step(f"{table} records which embedder made its vectors", run=run)


def recorded_embedder(conn: sqlite3.Connection, table: str) -> tuple[str, int] | None:
    """The (name, dim) of the embedder recorded for `table`, if any."""
    row = conn.execute("SELECT name, dim FROM vector_embedders WHERE vectors = ?", (table,)).fetchone()
    return None if row is None else (str(row[0]), int(row[1]))


def stored_embedder(path: Path, table: str, column: str) -> tuple[str, int] | None:
    """The (name, dim) of the embedder that made the vectors of `table` in the file at `path`,
    read without migrating it: the recorded one, else (vectors stored before there were
    records) the hashing embedder of their dimension; None for no file, table or vectors."""
    if not path.exists():
        return None
    with closing(sqlite3.connect(path)) as conn:
        try:
            return recorded_embedder(conn, table)
        except sqlite3.OperationalError:  # no record table yet
            pass
        try:
            row = conn.execute(f"SELECT length({column}) FROM {table} LIMIT 1").fetchone()
        except sqlite3.OperationalError:  # no table of vectors yet
            return None
    return None if row is None else (hashing_name(row[0] // 4), row[0] // 4)


def check_embedder(conn: sqlite3.Connection, table: str, name: str, dim: int) -> None:
    """Record the embedder (`name`, `dim`) for `table` if it has none yet; refuse another
    with `EmbedderMismatchError` naming both."""
    recorded = recorded_embedder(conn, table)
    if recorded is None:
        conn.execute("INSERT OR IGNORE INTO vector_embedders VALUES (?, ?, ?)", (table, name, dim))
        recorded = recorded_embedder(conn, table)  # another process may have recorded first
    if recorded != (name, dim):
        recorded_name = recorded[0] if recorded else "?"
        raise EmbedderMismatchError(f"{file_of(conn)} ({table})", recorded_name, name)


def reembed_table(
    conn: sqlite3.Connection, table: str, text_column: str, vector_column: str, embedder: Embedder, batch_size: int
) -> int:
    """Replace every vector of `table` by `embedder`'s vector of its text and record
    `embedder`; one transaction, so a failure leaves the table as it was. How many rows."""
    rows: list[tuple[int, str]] = conn.execute(f"SELECT id, {text_column} FROM {table} ORDER BY id").fetchall()
    vectors = _embed_all(embedder, [text for _, text in rows], batch_size)
    with transaction(conn):
        late = conn.execute(f"SELECT id, {text_column} FROM {table} WHERE id > ? ORDER BY id", (rows[-1][0] if rows else 0,)).fetchall()
        if late:  # stored by another process while the others were embedded
            rows += late
            vectors = np.concatenate([vectors, _embed_all(embedder, [text for _, text in late], batch_size)])
        conn.executemany(
            f"UPDATE {table} SET {vector_column} = ? WHERE id = ?",
            [(vector.astype(np.float32).tobytes(), id_) for (id_, _), vector in zip(rows, vectors, strict=True)],
        )
        conn.execute("INSERT OR REPLACE INTO vector_embedders VALUES (?, ?, ?)", (table, embedder.name, embedder.dim))
    return len(rows)


def _embed_all(embedder: Embedder, texts: Sequence[str], batch_size: int) -> Vectors:
    """`texts` embedded `batch_size` at a time, as one (len(texts), dim) array."""
    if not texts:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    return np.concatenate([embedder.embed(texts[start : start + batch_size]) for start in range(0, len(texts), batch_size)])
