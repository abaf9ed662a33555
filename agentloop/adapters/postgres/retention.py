"""Retention on the PostgreSQL backend: delete what a `Retention` lets go from a bot's schema
(and its finished inbox messages), then VACUUM the tables (not FULL: no table is locked
against the running bot) and, when asked, rebuild the vector indexes concurrently.

One prune of a bot runs at a time across processes: it holds an advisory lock, and a prune
that finds it taken returns at once. A history's age is the time of its last message, kept
in `history_activity` by a trigger on `session_messages`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import psycopg

from agentloop._log import get_logger
from agentloop.adapters.postgres._database import LoopThread, connect_once, one_line, schema_name
from agentloop.adapters.postgres._embedders import VECTOR_TABLES
from agentloop.adapters.errors import StoreUrlError
from agentloop.adapters.postgres.schema import Schema, Step, exists, search_path, vector_schema
from agentloop.adapters.postgres._scopes import SCOPE_COLUMNS_DDL, SCOPE_COLUMNS_SQL
from agentloop.adapters._rows import SCOPE_COLUMNS
from agentloop.adapters.urls import shown_url
from agentloop.errors import StoreError
from agentloop.retention import PruneReport, Retention

_log = get_logger("agentloop.retention")
_NEW_CHAIN = ", ".join(f"NEW.{column}" for column in SCOPE_COLUMNS)

SCHEMA = Schema(
    "retention",
    (
        Step(
            "the time of each history's last message, so retention can let old histories go",
            (
                f"CREATE TABLE history_activity ({SCOPE_COLUMNS_DDL}, last_at timestamptz NOT NULL)",
                f"CREATE UNIQUE INDEX history_activity_by_chain ON history_activity ({SCOPE_COLUMNS_SQL}) NULLS NOT DISTINCT",
                "CREATE INDEX history_activity_by_time ON history_activity (last_at)",
                f"""CREATE FUNCTION history_activity_on_append() RETURNS trigger LANGUAGE plpgsql
                SET search_path FROM CURRENT AS $$
                BEGIN
                    INSERT INTO history_activity VALUES ({_NEW_CHAIN}, now())
                    ON CONFLICT ({SCOPE_COLUMNS_SQL}) DO UPDATE SET last_at = excluded.last_at
                    WHERE history_activity.last_at < excluded.last_at - interval '1 hour';  -- at most hourly: retention counts days
                    RETURN NEW;
                END $$""",
                "CREATE TRIGGER history_activity_on_append AFTER INSERT ON session_messages "
                "FOR EACH ROW EXECUTE FUNCTION history_activity_on_append()",
                f"INSERT INTO history_activity SELECT {SCOPE_COLUMNS_SQL}, now() FROM session_messages GROUP BY {SCOPE_COLUMNS_SQL}",
            ),
        ),
    ),
)
_PRUNED_TABLES = (
    "session_messages", "session_appends", "session_summaries", "history_activity", "pending_approvals", "usage_calls",
    "tool_executions", "quarantined_executions",
)
_CHAIN_MATCH = " AND ".join(f"m.{column} IS NOT DISTINCT FROM a.{column}" for column in SCOPE_COLUMNS)
_FINISHED_JOBS = "('succeeded', 'failed', 'cancelled', 'aborted')"


def prune_postgres(
    url: str, *, bot: str, retention: Retention, now: datetime | None = None, compact: bool = True, vectors: bool = False
) -> PruneReport:
    """Apply `retention` to `bot`'s schema at `url` (see `prune_stores`)."""
    thread = LoopThread("agentloop-postgres-prune")
    try:
        return thread.submit(_prune(url, bot, retention, now or datetime.now(UTC), compact, vectors)).result()
    except psycopg.Error as error:
        raise StoreError(f"pruning the stores of {bot!r} at {shown_url(url)}", one_line(error)) from error
    finally:
        thread.stop()


async def _prune(url: str, bot: str, retention: Retention, now: datetime, compact: bool, vectors: bool) -> PruneReport:
    schema = schema_name(url, bot)
    async with await connect_once(url) as conn:
        lock = f"agentloop.prune.{schema}"
        if not (await (await conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (lock,))).fetchone() or (False,))[0]:
            _log.info("stores.prune_busy", bot=bot, reason="another process is pruning this bot")
            return PruneReport()
        try:
            await _check_schema(conn, url, bot, schema)
            before = await _size(conn, schema)
            deleted = {"inbox": await _prune_inbox(conn, bot, retention.before("inbox_days", now))}
            await conn.execute(search_path(schema, await vector_schema(conn)))
            async with conn.transaction():
                deleted["history"] = await _prune_history(conn, retention, now)
                deleted["summaries"] = await _prune_summaries(conn, retention.before("summaries_days", now))
                deleted["approvals"] = await _prune_approvals(conn, retention.before("approvals_days", now))
                deleted["usage"], rolled = await _roll_up_usage(conn, retention.before("usage_days", now))
                deleted["trajectories"] = await _prune_trajectories(conn, retention.before("trajectories_days", now))
            if compact:
                await conn.execute(f"VACUUM (ANALYZE) {', '.join(_PRUNED_TABLES)}")
            if vectors:
                for table in VECTOR_TABLES:
                    await conn.execute(f"REINDEX INDEX CONCURRENTLY {table.index}")
            report = PruneReport(deleted, rolled, before, await _size(conn, schema), compact)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (lock,))
    _log.info("stores.pruned", bot=bot, deleted=deleted, rolled_up=rolled, bytes_before=before, bytes_after=report.bytes_after)
    return report


async def _check_schema(conn: psycopg.AsyncConnection[Any], url: str, bot: str, schema: str) -> None:
    """StoreUrlError unless the bot's stores are there, at this release's retention schema."""
    if not await exists(conn, schema):
        raise StoreUrlError(shown_url(url), f"the bot {bot!r} has no stores there yet", "run the bot first, or give its URL and name")
    found = await (await conn.execute("SELECT to_regclass(%s)", (f'"{schema}".history_activity',))).fetchone()
    if found is None or found[0] is None:
        raise StoreUrlError(
            shown_url(url), f"the stores of {bot!r} are of an older release", f"run agentloop stores migrate URL --bot {bot} first"
        )


async def _size(conn: psycopg.AsyncConnection[Any], schema: str) -> int:
    """The bytes the bot's tables take, with their indexes and TOAST."""
    row = await (
        await conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        )
    ).fetchone()
    return int(row[0]) if row else 0


async def _prune_summaries(conn: psycopg.AsyncConnection[Any], cutoff: datetime | None) -> int:
    if cutoff is None:
        return 0
    return (await conn.execute("DELETE FROM session_summaries WHERE created_at < %s", (cutoff,))).rowcount


async def _prune_approvals(conn: psycopg.AsyncConnection[Any], cutoff: datetime | None) -> int:
    """Delete the decided approvals asked for before `cutoff` (read in Python: a JSON text with
    an escaped NUL is no jsonb)."""
    if cutoff is None:
        return 0
    decided = await (await conn.execute("SELECT seq, pending FROM pending_approvals WHERE decision IS NOT NULL")).fetchall()
    old = [seq for seq, pending in decided if datetime.fromisoformat(json.loads(pending)["request"]["created_at"]) < cutoff]
    return (await conn.execute("DELETE FROM pending_approvals WHERE seq = ANY(%s)", (old,))).rowcount


async def _prune_inbox(conn: psycopg.AsyncConnection[Any], bot: str, cutoff: datetime | None) -> int:
    """Delete the bot's inbox messages finished before `cutoff` and their finished jobs (with their events)."""
    if cutoff is None:
        return 0
    found = await (await conn.execute("SELECT to_regclass('agentloop_inbox')")).fetchone()
    if found is None or found[0] is None:
        return 0
    async with conn.transaction():
        jobs = await (
            await conn.execute("DELETE FROM agentloop_inbox WHERE bot = %s AND finished_at < %s RETURNING job_id", (bot, cutoff))
        ).fetchall()
        await conn.execute(
            f"DELETE FROM procrastinate_jobs WHERE id = ANY(%s) AND status IN {_FINISHED_JOBS}",
            ([job for (job,) in jobs if job is not None],),
        )
    return len(jobs)


async def _prune_history(conn: psycopg.AsyncConnection[Any], retention: Retention, now: datetime) -> int:
    removed = 0
    cutoff = retention.before("history_days", now)
    if cutoff is not None:
        for table in ("session_messages", "session_appends", "session_summaries"):
            cursor = await conn.execute(
                f"DELETE FROM {table} m USING history_activity a WHERE a.last_at < %s AND {_CHAIN_MATCH}", (cutoff,)
            )
            removed += cursor.rowcount if table == "session_messages" else 0
        await conn.execute("DELETE FROM history_activity WHERE last_at < %s", (cutoff,))
    if retention.history_turns is not None:
        removed += await _keep_turns(conn, retention.history_turns)
    return removed


async def _keep_turns(conn: psycopg.AsyncConnection[Any], turns: int) -> int:
    """Delete each history's messages before its `turns`-th newest user message; its summaries
    then cover as many fewer messages, so what they leave out stays the same."""
    await conn.execute(
        f"CREATE TEMP TABLE history_cut ON COMMIT DROP AS SELECT {SCOPE_COLUMNS_SQL}, id AS first_kept FROM "
        f"(SELECT {SCOPE_COLUMNS_SQL}, id, row_number() OVER (PARTITION BY {SCOPE_COLUMNS_SQL} ORDER BY id DESC) AS newest "
        "FROM session_messages WHERE role = 'user') AS users WHERE newest = %s".encode(),
        (turns,),
    )
    cut = await conn.execute(
        f"WITH gone AS (DELETE FROM session_messages m USING history_cut a WHERE {_CHAIN_MATCH} AND m.id < a.first_kept "
        f"RETURNING {', '.join(f'm.{column}' for column in SCOPE_COLUMNS)}) "
        f"SELECT {SCOPE_COLUMNS_SQL}, count(*) FROM gone GROUP BY {SCOPE_COLUMNS_SQL}".encode()
    )
    counts = await cut.fetchall()
    for *chain, count in counts:
        await conn.execute(
            "UPDATE session_summaries SET covered = greatest(covered - %s, 0) WHERE "
            + " AND ".join(f"{column} IS NOT DISTINCT FROM %s" for column in SCOPE_COLUMNS),
            (count, *chain),
        )
    return sum(int(count) for *_, count in counts)


async def _roll_up_usage(conn: psycopg.AsyncConnection[Any], cutoff: datetime | None) -> tuple[int, int]:
    """Replace the per-call rows of each whole day before `cutoff` by one row per day, tenant
    chain, session, model and priced-or-not, holding their sums and call count; (deleted, added)."""
    if cutoff is None:
        return 0, 0
    days = "day IN (SELECT DISTINCT day FROM usage_calls WHERE day < %s AND turn_id NOT LIKE 'day:%%')"
    day = cutoff.astimezone(UTC).strftime("%Y-%m-%d")
    await conn.execute(
        f"CREATE TEMP TABLE usage_days ON COMMIT DROP AS SELECT {SCOPE_COLUMNS_SQL}, day, model, cost IS NULL AS unpriced, "
        "sum(input_tokens) AS i, sum(output_tokens) AS o, sum(cache_read_tokens) AS r, sum(cache_write_tokens) AS w, "
        f"sum(cost) AS c, sum(calls) AS n FROM usage_calls WHERE {days} GROUP BY {SCOPE_COLUMNS_SQL}, day, model, unpriced".encode(),
        (day,),
    )
    deleted = (await conn.execute(f"DELETE FROM usage_calls WHERE {days}".encode(), (day,))).rowcount
    added = (
        await conn.execute(
            f"INSERT INTO usage_calls (turn_id, call_index, {SCOPE_COLUMNS_SQL}, at, day, model, input_tokens, output_tokens, "
            "cache_read_tokens, cache_write_tokens, cost, calls) "
            f"SELECT 'day:' || day, row_number() OVER (PARTITION BY day), {SCOPE_COLUMNS_SQL}, (day || 'T00:00:00Z')::timestamptz, "
            "day, model, i, o, r, w, CASE WHEN unpriced THEN NULL ELSE c END, n FROM usage_days".encode()
        )
    ).rowcount
    return deleted, added


async def _prune_trajectories(conn: psycopg.AsyncConnection[Any], cutoff: datetime | None) -> int:
    """Delete the executions each session ran before its last distillation, when that is older
    than `cutoff`, and executions quarantined before `cutoff`."""
    if cutoff is None:
        return 0
    removed = (
        await conn.execute(
            "DELETE FROM tool_executions e USING (SELECT session_id, max(distilled_at) AS last FROM distilled_trajectories "
            "GROUP BY session_id) d WHERE e.session_id = d.session_id AND d.last < %s AND e.started_at <= d.last",
            (cutoff,),
        )
    ).rowcount
    await conn.execute("DELETE FROM quarantined_executions WHERE quarantined_at < %s", (cutoff,))
    return removed
