"""The PostgreSQL AuditLog: one row per erase or export in the bot's schema."""

from __future__ import annotations

from agentloop.adapters.audit import audit_record, audit_row
from agentloop.adapters.postgres._database import Database, on_database
from agentloop.adapters.postgres.schema import Schema, Step
from agentloop.privacy import AuditRecord

SCHEMA = Schema(
    "audit",
    (
        Step(
            "who erased or exported whose data, when, and how many rows (never content)",
            (
                """CREATE TABLE audit_log (
                    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    actor text NOT NULL,
                    action text NOT NULL,
                    subject jsonb NOT NULL,
                    at timestamptz NOT NULL,
                    counts jsonb NOT NULL
                )""",
            ),
        ),
    ),
)


class PostgresAuditLog:
    """Audit rows, appended only."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @on_database
    async def record(self, record: AuditRecord) -> None:
        async with self._db.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO audit_log (actor, action, subject, at, counts) VALUES (%s, %s, %s::jsonb, %s, %s::jsonb)",
                audit_row(record),
            )

    @on_database(retry=True)
    async def records(self) -> list[AuditRecord]:
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute("SELECT actor, action, subject, at, counts FROM audit_log ORDER BY seq")
            return [audit_record(*row) for row in await cursor.fetchall()]
