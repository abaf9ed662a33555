"""The PostgreSQL UsageStore: one row per model call, summed by index for budgets and reports."""

from __future__ import annotations

from typing import Any

from agentloop.adapters.postgres.database import Database, on_database
from agentloop.adapters.postgres.schema import Schema, Step
from agentloop.adapters.postgres.scopes import SCOPE_COLUMNS_DDL, SCOPE_COLUMNS_SQL, SCOPE_MARKS
from agentloop.adapters.rows import SCOPE_COLUMNS, scope_values
from agentloop.adapters.usage import KEYS, SUMS, summed, utc_text
from agentloop.ports.usage import UsageFilter, UsageGroup, UsageLine, UsageRecord, UsageTotal

SCHEMA = Schema(
    "usage",
    (
        Step(
            "the tokens and cost of each model call, per turn",
            (
                f"""CREATE TABLE usage_calls (
                    turn_id text NOT NULL,
                    call_index integer NOT NULL,
                    {SCOPE_COLUMNS_DDL},
                    at timestamptz NOT NULL,
                    day text NOT NULL,
                    model text,
                    input_tokens bigint NOT NULL,
                    output_tokens bigint NOT NULL,
                    cache_read_tokens bigint NOT NULL,
                    cache_write_tokens bigint NOT NULL,
                    cost double precision,
                    PRIMARY KEY (turn_id, call_index)
                )""",
                "CREATE INDEX usage_calls_by_tenant ON usage_calls (scope_company, scope_org, scope_team, scope_project, at)",
                "CREATE INDEX usage_calls_by_user ON usage_calls (scope_company, scope_user, at)",
                "CREATE INDEX usage_calls_by_session ON usage_calls (scope_session, at)",
            ),
        ),
    ),
)


def _where(where: UsageFilter) -> tuple[str, list[Any]]:
    conditions, params = ["true"], list[Any]()
    for column, value in zip(SCOPE_COLUMNS, where.ids, strict=True):
        if value is not None:
            conditions.append(f"{column} = %s")
            params.append(value)
    if where.since is not None:
        conditions.append("at >= %s")
        params.append(where.since)
    if where.until is not None:
        conditions.append("at < %s")
        params.append(where.until)
    return " AND ".join(conditions), params


class PostgresUsageStore:
    """Usage rows keyed by (turn, call); a turn's rows go in one statement, and a turn already
    there (its first call's key taken) is not written again."""

    def __init__(self, db: Database) -> None:
        self._db = db

    @on_database(retry=True)  # idempotent by the turn's key
    async def record(self, record: UsageRecord) -> bool:
        if not record.calls:
            return False
        day = utc_text(record.at)[:10]
        values, params = [], list[Any]()
        for index, call in enumerate(record.calls):
            values.append(f"(%s, %s, {SCOPE_MARKS}, %s, %s, %s, %s, %s, %s, %s, %s)")
            params += [record.turn_id, index, *scope_values(record.scope), record.at, day, call.model, call.usage.input_tokens,
                       call.usage.output_tokens, call.usage.cache_read_tokens, call.usage.cache_write_tokens, call.cost]
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(
                f"INSERT INTO usage_calls (turn_id, call_index, {SCOPE_COLUMNS_SQL}, at, day, model, input_tokens, "
                f"output_tokens, cache_read_tokens, cache_write_tokens, cost) VALUES {', '.join(values)} "
                "ON CONFLICT (turn_id, call_index) DO NOTHING",
                params,
            )
            return cursor.rowcount > 0

    @on_database(retry=True)
    async def total(self, where: UsageFilter) -> UsageTotal:
        condition, params = _where(where)
        async with self._db.pool.connection() as conn:
            row = await (await conn.execute(f"SELECT {SUMS} FROM usage_calls WHERE {condition}", params)).fetchone()
        assert row is not None  # an aggregate always answers one row
        return summed(row)

    @on_database(retry=True)
    async def report(self, where: UsageFilter, by: UsageGroup) -> list[UsageLine]:
        condition, params = _where(where)
        async with self._db.pool.connection() as conn:
            cursor = await conn.execute(
                f"SELECT * FROM (SELECT {KEYS[by]} AS k, {SUMS} FROM usage_calls WHERE {condition} GROUP BY 1) AS lines "
                'ORDER BY k COLLATE "C"',
                params,
            )
            rows: list[tuple[Any, ...]] = await cursor.fetchall()
        return [UsageLine(str(row[0]), summed(row[1:])) for row in rows]
