"""SqliteTaskStore: the embedded TaskStore, one SQLite file (WAL)."""

from __future__ import annotations

import json
import sqlite3
import threading
from datetime import datetime
from pathlib import Path

from agentloop.adapters.sqlite import closing_on_error, connect
from agentloop.ports.tasks import TaskRecord, TaskState

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    template TEXT NOT NULL,
    inputs TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    claimed_by TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_state ON tasks (state, seq);
"""
_COLUMNS = "id, template, inputs, state, created_at, updated_at, claimed_by, attempts"


class SqliteTaskStore:
    """Tasks in a SQLite file; every state change is one compare-and-set UPDATE."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = connect(self.path)
        with closing_on_error(self._db):
            self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(self, record: TaskRecord) -> None:
        with self._lock:
            try:
                self._db.execute(
                    f"INSERT INTO tasks ({_COLUMNS}, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, "
                    f"(SELECT COALESCE(MAX(seq), 0) + 1 FROM tasks))",
                    (
                        record.id,
                        record.template,
                        json.dumps(record.inputs),
                        record.state.value,
                        record.created_at.isoformat(),
                        record.updated_at.isoformat(),
                        record.claimed_by,
                        record.attempts,
                    ),
                )
            except sqlite3.IntegrityError:
                raise ValueError(f"a task with id {record.id!r} already exists") from None

    def get(self, task_id: str) -> TaskRecord | None:
        with self._lock:
            row = self._db.execute(f"SELECT {_COLUMNS} FROM tasks WHERE id = ?", (task_id,)).fetchone()
        return None if row is None else _record(row)

    def move(
        self,
        task_id: str,
        allowed_from: tuple[TaskState, ...],
        to: TaskState,
        *,
        updated_at: datetime,
        claimed_by: str | None,
        count_attempt: bool = False,
    ) -> TaskRecord | None:
        marks = ", ".join("?" for _ in allowed_from)
        with self._lock:
            cursor = self._db.execute(
                f"UPDATE tasks SET state = ?, updated_at = ?, claimed_by = ?, attempts = attempts + ? "
                f"WHERE id = ? AND state IN ({marks})",
                (to.value, updated_at.isoformat(), claimed_by, int(count_attempt), task_id, *(s.value for s in allowed_from)),
            )
            if cursor.rowcount == 0:
                return None
            row = self._db.execute(f"SELECT {_COLUMNS} FROM tasks WHERE id = ?", (task_id,)).fetchone()
        return _record(row)

    def in_state(self, state: TaskState) -> tuple[TaskRecord, ...]:
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM tasks WHERE state = ? ORDER BY seq", (state.value,)).fetchall()
        return tuple(_record(row) for row in rows)


def _record(row: tuple[str, str, str, str, str, str, str | None, int]) -> TaskRecord:
    task_id, template, inputs, state, created, updated, claimed_by, attempts = row
    return TaskRecord(
        id=task_id,
        template=template,
        inputs=json.loads(inputs),
        state=TaskState(state),
        created_at=datetime.fromisoformat(created),
        updated_at=datetime.fromisoformat(updated),
        claimed_by=claimed_by,
        attempts=attempts,
    )
