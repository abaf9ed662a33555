"""The PostgreSQL TaskStore: tasks with their scope, chain and lease; every move is one
compare-and-set UPDATE, so agents in many processes claim a task at most once."""

from __future__ import annotations


from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from agentloop.adapters.postgres._database import Database, on_database
from agentloop.adapters.postgres._subjects import SubjectRows, Table
from agentloop.adapters._subjects import Columns
from agentloop.adapters.postgres.schema import Schema, Step
from agentloop.adapters.postgres._scopes import SCOPE_COLUMNS_DDL, SCOPE_COLUMNS_SQL, SCOPE_MARKS, row_scope, scope_match
from agentloop.adapters._rows import rows
from agentloop.adapters._rows import SCOPE_COLUMNS, scope_values
from agentloop.ports.tasks import TaskRecord, TaskState
from agentloop.scopes import Scope

_CHAIN_COLUMNS = tuple(column.replace("scope_", "chain_") for column in SCOPE_COLUMNS)
_CHAIN_COLUMNS_SQL = ", ".join(_CHAIN_COLUMNS)
TABLES = (Table("task", "tasks", Columns("chain_company", "chain_org", "chain_team", "chain_project", "chain_user", "chain_session"), "seq"),)
"""A task is its subject's by the chain of the session that created it."""
SCHEMA = Schema(
    "tasks",
    (
        Step(
            "tasks with their scope, the creating session's chain and the claim's lease",
            (
                f"""CREATE TABLE tasks (
                    seq bigint GENERATED ALWAYS AS IDENTITY,
                    id text PRIMARY KEY,
                    template text NOT NULL,
                    inputs text NOT NULL,
                    state text NOT NULL,
                    created_at timestamptz NOT NULL,
                    updated_at timestamptz NOT NULL,
                    claimed_by text,
                    attempts integer NOT NULL DEFAULT 0,
                    lease_expires_at timestamptz,
                    {SCOPE_COLUMNS_DDL},
                    {SCOPE_COLUMNS_DDL.replace("scope_", "chain_")}
                )""",
                f"CREATE INDEX tasks_by_scope_state ON tasks ({SCOPE_COLUMNS_SQL}, state, seq)",
            ),
        ),
    ),
)
_COLUMNS = (
    "id, template, inputs, state, created_at, updated_at, claimed_by, attempts, lease_expires_at, "
    f"{SCOPE_COLUMNS_SQL}, {_CHAIN_COLUMNS_SQL}"
)


def _record(row: dict[str, Any]) -> TaskRecord:
    """The task a row holds: its scope and chain are read from their six columns each."""
    scope = row_scope([row[column] for column in SCOPE_COLUMNS])
    chain = row_scope([row[column] for column in _CHAIN_COLUMNS])
    return rows.structure(row | {"scope": scope.key, "chain": chain.key}, TaskRecord)


class PostgresTaskStore(SubjectRows):
    """Task records by id within a scope."""

    ERASED = TABLES
    EXPORTED = TABLES

    def __init__(self, db: Database) -> None:
        self._db = db

    @on_database
    async def add(self, record: TaskRecord) -> None:
        async with self._db.pool.connection() as conn:
            try:
                values = rows.unstructure(record)
                del values["scope"], values["chain"]
                await conn.execute(
                    f"INSERT INTO tasks ({', '.join(values)}, {SCOPE_COLUMNS_SQL}, {_CHAIN_COLUMNS_SQL}) "
                    f"VALUES ({', '.join(['%s'] * len(values))}, {SCOPE_MARKS}, {SCOPE_MARKS})",
                    (*values.values(), *scope_values(record.scope), *scope_values(record.chain)),
                )
            except psycopg.errors.UniqueViolation:
                raise ValueError(f"a task with id {record.id!r} already exists") from None

    @on_database(retry=True)
    async def get(self, task_id: str, scope: Scope) -> TaskRecord | None:
        where, params = scope_match(scope)
        async with self._db.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(f"SELECT {_COLUMNS} FROM tasks WHERE id = %s AND {where}", (task_id, *params))
            row = await cursor.fetchone()
        return None if row is None else _record(row)

    @on_database
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
        where, params = scope_match(scope)
        conditions: list[str] = [f"id = %s AND {where} AND state = ANY(%s)"]
        values: list[object] = [task_id, *params, [state.value for state in allowed_from]]
        if held_by is not None:
            conditions.append("claimed_by = %s")
            values.append(held_by)
        if unchanged_since is not None:
            conditions.append("updated_at = %s")
            values.append(unchanged_since)
        async with self._db.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(
                "UPDATE tasks SET state = %s, updated_at = %s, claimed_by = %s, attempts = attempts + %s, "
                f"lease_expires_at = %s WHERE {' AND '.join(conditions)} RETURNING {_COLUMNS}",
                (to.value, updated_at, claimed_by, int(count_attempt), lease_expires_at, *values),
            )
            row = await cursor.fetchone()
        return None if row is None else _record(row)

    @on_database(retry=True)
    async def in_state(self, state: TaskState, scope: Scope) -> tuple[TaskRecord, ...]:
        where, params = scope_match(scope)
        async with self._db.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(f"SELECT {_COLUMNS} FROM tasks WHERE {where} AND state = %s ORDER BY seq", (*params, state.value))
            return tuple(_record(row) for row in await cursor.fetchall())

