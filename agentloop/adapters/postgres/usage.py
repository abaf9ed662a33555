"""The PostgreSQL UsageStore: one row per model call, summed by index for budgets and reports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from agentloop.adapters.postgres._database import Database, on_database
from agentloop.adapters.postgres._subjects import SubjectRows, Table, subject_indexes
from agentloop.adapters._subjects import SCOPED
from agentloop.adapters.postgres.schema import Schema, Step
from agentloop.adapters.postgres._scopes import SCOPE_COLUMNS_DDL, SCOPE_COLUMNS_SQL, SCOPE_MARKS
from agentloop.adapters._rows import SCOPE_COLUMNS, scope_values
from agentloop.adapters.usage import KEYS, SUMS, fits_sql, in_key_order, summed, utc_text
from agentloop.ports.usage import Charge, Spent, UsageFilter, UsageGroup, UsageLine, UsageRecord, UsageTotal

TABLES = (Table("call", "usage_calls", SCOPED, "ctid", indexed=("scope_session",)),)
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
        Step(
            "a ledger line per budget and period: the tokens and dollars reserved or spent",
            ("CREATE TABLE budget_ledger (key text PRIMARY KEY, tokens bigint NOT NULL, cost double precision NOT NULL)",),
        ),
        Step("rows by user and by session, so erasing one reads only theirs", subject_indexes(*TABLES)),
        Step(
            "a row may sum several calls (retention rolls old days up), so each counts its calls",
            ("ALTER TABLE usage_calls ADD COLUMN calls bigint NOT NULL DEFAULT 1",),
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


class PostgresUsageStore(SubjectRows):
    """Usage rows keyed by (turn, call); a turn's rows go in one statement, and a turn already
    there (its first call's key taken) is not written again."""

    ERASED = TABLES
    EXPORTED = TABLES

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

    @on_database
    async def reserve(self, charges: Sequence[Charge]) -> Charge | None:
        async with self._db.pool.connection() as conn:
            try:
                async with conn.transaction():  # each line's row stays locked until all fit, or none is charged
                    for charge in in_key_order(charges):
                        if not await _charge(conn, charge, checked=True):
                            raise _Refused(charge)
            except _Refused as refused:
                return refused.charge
        return None

    @on_database
    async def spend(self, charges: Sequence[Charge]) -> None:
        async with self._db.pool.connection() as conn, conn.transaction():
            for charge in in_key_order(charges):
                await _charge(conn, charge, checked=False)

    @on_database(retry=True)
    async def spent(self, key: str) -> Spent:
        async with self._db.pool.connection() as conn:
            row = await (await conn.execute("SELECT tokens, cost FROM budget_ledger WHERE key = %s", (key,))).fetchone()
        return Spent() if row is None else Spent(int(row[0]), float(row[1]))



async def _charge(conn: psycopg.AsyncConnection[Any], charge: Charge, *, checked: bool) -> bool:
    """Add `charge` to its line, creating it; an UPDATE's WHERE decides on the row it locked, so
    concurrent reservations of one line are taken one after another."""
    await conn.execute("INSERT INTO budget_ledger (key, tokens, cost) VALUES (%s, 0, 0) ON CONFLICT (key) DO NOTHING", (charge.key,))
    condition, params = fits_sql(charge, "%s") if checked else ("true", [])
    cursor = await conn.execute(
        f"UPDATE budget_ledger SET tokens = tokens + %s, cost = cost + %s WHERE key = %s AND {condition} RETURNING tokens",
        [charge.tokens, charge.cost, charge.key, *params],
    )
    return await cursor.fetchone() is not None


class _Refused(Exception):
    """A charge that does not fit: the reservation's transaction rolls back."""

    def __init__(self, charge: Charge) -> None:
        super().__init__(charge.key)
        self.charge = charge
