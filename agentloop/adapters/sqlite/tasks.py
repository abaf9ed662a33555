"""SqliteTaskStore: the embedded TaskStore, one SQLite file (WAL)."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

from agentloop.adapters._rows import rows
from agentloop.adapters.sqlite._connection import closing_on_error, connect, transaction
from agentloop.adapters.sqlite.schema import Schema, Step, add_missing_columns, has_table, migrate
from agentloop.ports.tasks import TaskRecord, TaskState
from agentloop.privacy import Subject
from agentloop.scopes import Scope
from agentloop.adapters.sqlite._thread import OnItsThread



def _chains(conn: sqlite3.Connection) -> None:
    """Earlier rows recorded no chain: they go to the chain with no org, team or project."""
    add_missing_columns(
        conn,
        "tasks",
        {
            "scope": f"TEXT NOT NULL DEFAULT '{Scope().key}'",
            "chain": f"TEXT NOT NULL DEFAULT '{Scope().key}'",
            "lease_expires_at": "TEXT",
        },
    )
    conn.execute("DROP INDEX IF EXISTS tasks_state")
    conn.execute("CREATE INDEX IF NOT EXISTS tasks_scope_state ON tasks (scope, state, seq)")


SCHEMA = Schema(
    "tasks",
    (
        Step(
            "tasks without a tenant chain (release 0.1)",
            (
                """CREATE TABLE IF NOT EXISTS tasks (
                    id TEXT PRIMARY KEY,
                    template TEXT NOT NULL,
                    inputs TEXT NOT NULL,
                    state TEXT NOT NULL,
                    created_at TEXT NOT NULL,
                    updated_at TEXT NOT NULL,
                    claimed_by TEXT,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    seq INTEGER NOT NULL
                )""",
                "CREATE INDEX IF NOT EXISTS tasks_state ON tasks (state, seq)",
            ),
        ),
        Step("each task keeps its scope and chain, and a claim its lease", run=_chains),
    ),
    has_table("tasks"),
)
_COLUMNS = "id, template, inputs, state, created_at, updated_at, claimed_by, attempts, scope, chain, lease_expires_at"
_COLUMN_NAMES = _COLUMNS.split(", ")
_Row = tuple[str, str, str, str, str, str, str | None, int, str, str, str | None]


class SqliteTaskStore:
    """Tasks in a SQLite file; every state change is one compare-and-set UPDATE."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = connect(self.path)
        with closing_on_error(self._db):
            migrate(self._db, SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(self, record: TaskRecord) -> None:
        with self._lock:
            try:
                self._db.execute(
                    f"INSERT INTO tasks ({_COLUMNS}, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                    f"(SELECT COALESCE(MAX(seq), 0) + 1 FROM tasks))",
                    tuple(rows.unstructure(record)[name] for name in _COLUMN_NAMES),
                )
            except sqlite3.IntegrityError:
                raise ValueError(f"a task with id {record.id!r} already exists") from None

    def get(self, task_id: str, scope: Scope) -> TaskRecord | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_COLUMNS} FROM tasks WHERE id = ? AND scope = ?", (task_id, scope.key)
            ).fetchone()
        return None if row is None else _record(row)

    def move(
        self,
        task_id: str,
        scope: Scope,
        allowed_from: tuple[TaskState, ...],
        to: TaskState,
        *,
        updated_at: datetime,
        claimed_by: str | None,
        count_attempt: bool = False,
        lease_expires_at: datetime | None = None,
        held_by: str | None = None,
        unchanged_since: datetime | None = None,
    ) -> TaskRecord | None:
        marks = ", ".join("?" for _ in allowed_from)
        conditions = [f"id = ? AND scope = ? AND state IN ({marks})"]
        params: list[object] = [task_id, scope.key, *(s.value for s in allowed_from)]
        if held_by is not None:
            conditions.append("claimed_by = ?")
            params.append(held_by)
        if unchanged_since is not None:
            conditions.append("updated_at = ?")
            params.append(unchanged_since.isoformat())
        with self._lock:
            cursor = self._db.execute(
                "UPDATE tasks SET state = ?, updated_at = ?, claimed_by = ?, attempts = attempts + ?, "
                f"lease_expires_at = ? WHERE {' AND '.join(conditions)}",
                (to.value, updated_at.isoformat(), claimed_by, int(count_attempt), _when(lease_expires_at), *params),
            )
            if cursor.rowcount == 0:
                return None
            row = self._db.execute(f"SELECT {_COLUMNS} FROM tasks WHERE id = ?", (task_id,)).fetchone()
        return _record(row)

    def in_state(self, state: TaskState, scope: Scope) -> tuple[TaskRecord, ...]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM tasks WHERE scope = ? AND state = ? ORDER BY seq", (scope.key, state.value)
            ).fetchall()
        return tuple(_record(row) for row in rows)

    def subject_rows(self, subject: Subject) -> list[dict[str, Any]]:
        """The raw rows of `subject`'s tasks: those its chain or sessions created (a scan: tasks are few)."""
        with self._lock:
            found = self._db.execute(f"SELECT {_COLUMNS} FROM tasks ORDER BY seq").fetchall()
        return [
            {"kind": "task"} | dict(zip(_COLUMN_NAMES, row, strict=True))
            for row in found if subject.matches(Scope.from_key(row[9]))
        ]

    def erase(self, subject: Subject) -> int:
        """Delete `subject`'s tasks, in one transaction; how many."""
        with self._lock, transaction(self._db):
            ids = [row[0] for row in self._db.execute("SELECT id, chain FROM tasks") if subject.matches(Scope.from_key(row[1]))]
            self._db.execute("DELETE FROM tasks WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(ids),))
        return len(ids)


def _when(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _record(row: _Row) -> TaskRecord:
    return rows.structure(dict(zip(_COLUMN_NAMES, row, strict=True)), TaskRecord)


class AsyncSqliteTaskStore(OnItsThread[SqliteTaskStore]):
    """The TaskStore port on a `SqliteTaskStore` (`engine`)."""

    async def add(self, record: TaskRecord) -> None:
        await self._thread.run(self.engine.add, record)

    async def get(self, task_id: str, scope: Scope) -> TaskRecord | None:
        return await self._thread.read(self.engine.get, task_id, scope)

    async def move(
        self,
        task_id: str,
        scope: Scope,
        allowed_from: tuple[TaskState, ...],
        to: TaskState,
        *,
        updated_at: datetime,
        claimed_by: str | None,
        count_attempt: bool = False,
        lease_expires_at: datetime | None = None,
        held_by: str | None = None,
        unchanged_since: datetime | None = None,
    ) -> TaskRecord | None:
        return await self._thread.run(
            self.engine.move, task_id, scope, allowed_from, to, updated_at=updated_at, claimed_by=claimed_by,
            count_attempt=count_attempt, lease_expires_at=lease_expires_at, held_by=held_by,
            unchanged_since=unchanged_since,
        )

    async def in_state(self, state: TaskState, scope: Scope) -> tuple[TaskRecord, ...]:
        return await self._thread.read(self.engine.in_state, state, scope)

    async def erase(self, subject: Subject) -> int:
        return await self._thread.run(self.engine.erase, subject)

    async def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        for row in await self._thread.read(self.engine.subject_rows, subject):
            yield row
