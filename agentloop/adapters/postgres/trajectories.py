"""The PostgreSQL TrajectoryStore: captured tool executions with their tenant chain,
distilled trajectory hashes and the executions the store refused."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from agentloop.adapters.postgres._database import Database, on_database
from agentloop.adapters.postgres._subjects import SubjectRows, Table, delete_rows, subject_indexes
from agentloop.adapters._subjects import EXECUTIONS, SESSION_ONLY
from agentloop.privacy import Subject
from agentloop.adapters.postgres.schema import Schema, Step
from agentloop.adapters.postgres._scopes import columns_match
from agentloop.adapters.postgres._text import loaded, stored
from agentloop.adapters._rows import rows
from agentloop.components import ToolExecution
from agentloop.notes.errors import ExecutionRefusedError
from agentloop.notes.capture import cut_quarantine_record, quarantine_record
from agentloop.notes.models import Trajectory
from agentloop.scopes import Scope

TABLES = (
    Table("execution", "tool_executions", EXECUTIONS, "seq", indexed=("session_id",)),
    Table("distilled", "distilled_trajectories", SESSION_ONLY, "hash"),
    Table("quarantined", "quarantined_executions", SESSION_ONLY, "seq"),
)
"""What an erase or export of trajectories covers: a distilled or quarantined row names its session only."""
SCHEMA = Schema(
    "trajectories",
    (
        Step(
            "tool executions in their tenant chain, distilled trajectories, refused executions",
            (
                """CREATE TABLE tool_executions (
                    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    id text NOT NULL UNIQUE,
                    session_id text NOT NULL,
                    company_id text NOT NULL,
                    org_id text,
                    team_id text,
                    project_id text,
                    user_id text,
                    parent_id text,
                    step_id text,
                    tool_name text NOT NULL,
                    arguments text NOT NULL,
                    result text,
                    error text,
                    started_at timestamptz NOT NULL,
                    duration_ms double precision NOT NULL,
                    context_snapshot text NOT NULL
                )""",
                "CREATE INDEX tool_executions_by_session ON tool_executions "
                "(session_id, company_id, org_id, team_id, project_id, user_id, started_at, seq)",
                """CREATE TABLE distilled_trajectories (
                    hash text PRIMARY KEY,
                    session_id text NOT NULL,
                    note_id bigint NOT NULL,
                    distilled_at timestamptz NOT NULL
                )""",
                """CREATE TABLE quarantined_executions (
                    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    id text NOT NULL,
                    session_id text NOT NULL,
                    tool_name text NOT NULL,
                    reason text NOT NULL,
                    execution text NOT NULL,
                    quarantined_at timestamptz NOT NULL
                )""",
            ),
        ),
        Step("rows by user and by session, so erasing one reads only theirs", subject_indexes(*TABLES)),
    ),
)
_COLUMNS = (
    "id, session_id, company_id, org_id, team_id, project_id, user_id, parent_id, step_id, tool_name, "
    "arguments, result, error, started_at, duration_ms, context_snapshot"
)
_QUARANTINED = "id, session_id, tool_name, reason, execution"
_CHAIN = ("company_id", "org_id", "team_id", "project_id", "user_id")


def _free_text(values: dict[str, Any], codec: Callable[[str], str]) -> dict[str, Any]:
    """`values` with the tool's result and error passed through `codec` (`stored` or `loaded`)."""
    return values | {name: None if values[name] is None else codec(values[name]) for name in ("result", "error")}


class PostgresTrajectoryStore(SubjectRows):
    """Tool executions and distilled-trajectory hashes.

    Arguments and context snapshots are stored as JSON text (values JSON cannot hold as
    their `str`); text PostgreSQL cannot hold (a NUL character, a lone surrogate) makes
    `append` raise `ExecutionRefusedError`, so capture quarantines that execution.
    """

    ERASED = TABLES
    EXPORTED = TABLES

    def __init__(self, db: Database) -> None:
        self._db = db

    @on_database(retry=True)
    async def append(self, executions: Sequence[ToolExecution]) -> None:
        try:
            values = [_free_text(rows.unstructure(e), stored) for e in executions]
            async with self._db.pool.connection() as conn, conn.transaction(), conn.cursor() as cursor:
                await cursor.executemany(
                    f"INSERT INTO tool_executions ({_COLUMNS}) VALUES ({', '.join(f'%({c})s' for c in _COLUMNS.split(', '))}) "
                    "ON CONFLICT (id) DO NOTHING",
                    values,
                )
        except (psycopg.DataError, UnicodeEncodeError) as exc:
            raise ExecutionRefusedError(
                f"the trajectory store refuses this batch of {len(executions)} tool executions "
                f"for what one of them holds ({exc}); it will never take that execution as it is"
            ) from exc

    @on_database(retry=True)
    async def load(self, session_id: str, scope: Scope | None = None) -> Trajectory:
        where, params = "session_id = %s", [session_id]
        if scope is not None:
            chain, values = columns_match(
                _CHAIN, (scope.company_id, scope.org_id, scope.team_id, scope.project_id, scope.user_id)
            )
            where, params = f"{where} AND {chain}", params + values
        async with self._db.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(f"SELECT {_COLUMNS} FROM tool_executions WHERE {where} ORDER BY started_at, seq", params)
            found = await cursor.fetchall()
        return Trajectory(session_id, tuple(rows.structure(_free_text(row, loaded), ToolExecution) for row in found))

    @on_database
    async def quarantine(self, execution: ToolExecution, reason: str) -> None:
        record = quarantine_record(execution, reason)
        try:
            await self._keep(record)
        except (psycopg.DataError, psycopg.errors.ProgramLimitExceeded):  # too large: keep its start, marked as cut
            await self._keep(cut_quarantine_record(record))

    async def _keep(self, record: dict[str, str]) -> None:
        """Store the record, its NUL characters (ASCII, yet not for PostgreSQL text) escaped."""
        async with self._db.pool.connection() as conn:
            await conn.execute(
                f"INSERT INTO quarantined_executions ({_QUARANTINED}, quarantined_at) VALUES (%s, %s, %s, %s, %s, %s)",
                (*(stored(record[name]) for name in _QUARANTINED.split(", ")), datetime.now(UTC)),
            )

    @on_database(retry=True)
    async def quarantined(self) -> list[dict[str, str]]:
        async with self._db.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(f"SELECT {_QUARANTINED} FROM quarantined_executions ORDER BY seq")
            return [{name: loaded(value) for name, value in row.items()} for row in await cursor.fetchall()]

    @on_database(retry=True)
    async def count(self) -> int:
        async with self._db.pool.connection() as conn:
            row = await (await conn.execute("SELECT count(*) FROM tool_executions")).fetchone()
        return 0 if row is None else int(row[0])

    @on_database(retry=True)
    async def mark_distilled(self, trajectory_hash: str, session_id: str, note_id: int, at: datetime) -> None:
        async with self._db.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO distilled_trajectories (hash, session_id, note_id, distilled_at) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING",
                (trajectory_hash, session_id, note_id, at),
            )

    @on_database(retry=True)
    async def is_distilled(self, trajectory_hash: str) -> bool:
        async with self._db.pool.connection() as conn:
            row = await (
                await conn.execute("SELECT 1 FROM distilled_trajectories WHERE hash = %s", (trajectory_hash,))
            ).fetchone()
        return row is not None

    async def _erase_in(self, conn: psycopg.AsyncConnection[Any], subject: Subject) -> int:
        removed = await delete_rows(conn, subject, TABLES)
        # The notes an erase removes: other sessions that led to them are distilled again.
        cursor = await conn.execute("DELETE FROM distilled_trajectories WHERE note_id = ANY(%s)", (sorted(subject.notes),))
        return removed + max(cursor.rowcount, 0)
