"""The PostgreSQL ApprovalStore: tool calls awaiting the user's approval, each decided once."""

from __future__ import annotations


import json
from typing import Any

import psycopg

from agentloop.adapters.postgres._database import Database, keyed, on_database
from agentloop.adapters.postgres._subjects import SubjectRows, Table, subject_indexes
from agentloop.adapters._subjects import SCOPED
from agentloop.adapters.postgres.schema import Schema, Step
from agentloop.adapters.postgres._scopes import SCOPE_COLUMNS_DDL, SCOPE_COLUMNS_SQL, SCOPE_MARKS, scope_match
from agentloop.adapters._rows import scope_values
from agentloop.approvals import PendingApproval
from agentloop.outcome import converter
from agentloop.scopes import Scope

TABLES = (Table("approval", "pending_approvals", SCOPED, "seq", session_column="session_id", indexed=("session_id",)),)
SCHEMA = Schema(
    "approvals",
    (
        Step(
            "tool calls awaiting approval, each decided once",
            (
                f"""CREATE TABLE pending_approvals (
                    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    approval_id text NOT NULL UNIQUE,
                    {SCOPE_COLUMNS_DDL},
                    session_id text NOT NULL,
                    decision text,
                    taken_by text,
                    pending text NOT NULL
                )""",
                f"CREATE INDEX pending_approvals_by_session ON pending_approvals (session_id, {SCOPE_COLUMNS_SQL}, seq)",
            ),
        ),
        Step("rows by user and by session, so erasing one reads only theirs", subject_indexes(*TABLES)),
    ),
)
_DECISIONS = {True: "approved", False: "denied"}


def _loaded(text: str) -> PendingApproval:
    return converter.structure(json.loads(text), PendingApproval)


class PostgresApprovalStore(SubjectRows):
    """Pending approvals as JSON text (escaped, so no NUL reaches a column) beside their scope
    columns; a decision is one UPDATE of the undecided row, so of concurrent takers one wins."""

    ERASED = TABLES
    EXPORTED = TABLES

    def __init__(self, db: Database) -> None:
        self._db = db

    @on_database
    async def add(self, pending: PendingApproval) -> None:
        body = json.dumps(converter.unstructure(pending))
        try:
            async with self._db.pool.connection() as conn:
                await conn.execute(
                    f"INSERT INTO pending_approvals (approval_id, {SCOPE_COLUMNS_SQL}, session_id, pending) "
                    f"VALUES (%s, {SCOPE_MARKS}, %s, %s)",
                    (pending.request.approval_id, *scope_values(pending.scope), pending.request.session_id, body),
                )
        except psycopg.errors.UniqueViolation:
            raise ValueError(f"an approval with id {pending.request.approval_id!r} is stored already") from None

    @on_database(retry=True)
    async def pending(self, scope: Scope, session_id: str) -> list[PendingApproval]:
        where, params = scope_match(scope)
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(
                f"SELECT pending FROM pending_approvals WHERE session_id = %s AND {where} AND decision IS NULL ORDER BY seq",
                (session_id, *params),
            )
            rows: list[tuple[Any, ...]] = await cursor.fetchall()
        return [_loaded(text) for (text,) in rows]

    @on_database(retry=keyed)
    async def take(self, scope: Scope, approval_id: str, approved: bool, *, key: str | None = None) -> PendingApproval | None:
        where, params = scope_match(scope)
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(
                f"UPDATE pending_approvals SET decision = %s, taken_by = %s WHERE approval_id = %s AND {where} "
                "AND (decision IS NULL OR (taken_by = %s AND decision = %s)) RETURNING pending",
                (_DECISIONS[approved], key, approval_id, *params, key, _DECISIONS[approved]),
            )
            row = await cursor.fetchone()
        return None if row is None else _loaded(row[0])

