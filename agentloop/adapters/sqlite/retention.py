"""Retention on the SQLite backend: delete what a `Retention` lets go from a bot's files, then
compact them (FTS5 'optimize', VACUUM) so the space and the search time come back.

A history's age is the time of its last message, kept in `history_activity` by a trigger on
`session_messages`; histories written before that table existed count from its creation.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

from agentloop._log import get_logger
from agentloop.adapters.sqlite import approvals, sessions, summaries, usage
from agentloop.adapters.sqlite import trajectories as sqlite_trajectories
from agentloop.adapters.sqlite._connection import connect, transaction
from agentloop.adapters.sqlite.schema import Schema, Step, columns, has_table, migrate
from agentloop.adapters.sqlite._scopes import SCOPE_COLUMNS_DDL, SCOPE_COLUMNS_SQL, SCOPE_MATCH
from agentloop.adapters.usage import utc_text
from agentloop.errors import StoreError
from agentloop.retention import PruneReport, Retention

_log = get_logger("agentloop.retention")
_NOW = "(julianday('now') - 2440587.5) * 86400.0"
"""The current time in seconds since the epoch, in SQL."""
_CHAIN = f"json_array({SCOPE_COLUMNS_SQL})"
_NEW_CHAIN = ", ".join(f"new.{column}" for column in SCOPE_COLUMNS_SQL.split(", "))
ACTIVITY_STEP_S = 3600
"""How stale a history's last-write time may be: it is moved on at most once an hour."""

SCHEMA = Schema(
    "retention",
    (
        Step(
            "the time of each history's last message, so retention can let old histories go",
            (
                f"CREATE TABLE history_activity (chain TEXT PRIMARY KEY, {SCOPE_COLUMNS_DDL}, last_at REAL NOT NULL)",
                "CREATE INDEX history_activity_by_time ON history_activity (last_at)",
                # written at most once an hour per history (retention counts days): a turn's append rarely pays for it
                f"CREATE TRIGGER history_activity_on_append AFTER INSERT ON session_messages BEGIN "
                f"INSERT INTO history_activity (chain, {SCOPE_COLUMNS_SQL}, last_at) "
                f"VALUES (json_array({_NEW_CHAIN}), {_NEW_CHAIN}, {_NOW}) ON CONFLICT (chain) DO UPDATE "
                f"SET last_at = excluded.last_at WHERE excluded.last_at > history_activity.last_at + {ACTIVITY_STEP_S}; END",
                f"INSERT INTO history_activity (chain, {SCOPE_COLUMNS_SQL}, last_at) "
                f"SELECT {_CHAIN}, {SCOPE_COLUMNS_SQL}, {_NOW} FROM session_messages GROUP BY {SCOPE_COLUMNS_SQL}",
            ),
        ),
    ),
    has_table("history_activity"),
)
_FTS_TABLES = ("rag_documents_words", "knowledge_items_words")


def bot_files(directory: Path, bot: str) -> list[Path]:
    """Every file of `bot` in `directory` whose size a prune reports (databases, their WAL, vector indexes)."""
    stems = (f"{bot}.sqlite3", f"{bot}.notes.sqlite3", f"{bot}.trajectories.sqlite3", f"{bot}.tasks.sqlite3")
    found = [directory / f"{stem}{suffix}" for stem in stems for suffix in ("", "-wal")]
    found += [directory / f"{bot}.rag.hnsw", directory / f"{bot}.notes.sqlite3.hnsw"]
    return [path for path in found if path.exists()]


def size_of(directory: Path, bot: str) -> int:
    return sum(path.stat().st_size for path in bot_files(directory, bot))


def prune_sqlite(
    directory: Path, *, bot: str, retention: Retention, now: datetime | None = None, compact: bool = True, vectors: bool = False
) -> PruneReport:
    """Apply `retention` to `bot`'s files in `directory` as of `now`, then compact them unless told
    not to; `vectors` also drops the vector index files, rebuilt from the rows at the next open
    (only with the bot stopped)."""
    try:
        return _prune(directory, bot, retention, now or datetime.now(UTC), compact, vectors)
    except sqlite3.Error as error:
        raise StoreError(f"pruning the stores of {bot!r} in {directory}", str(error)) from error


def _prune(directory: Path, bot: str, retention: Retention, now: datetime, compact: bool, vectors: bool) -> PruneReport:
    before = size_of(directory, bot)
    deleted: dict[str, int] = {}
    with closing(connect(directory / f"{bot}.sqlite3")) as conn:
        for schema in (sessions.SCHEMA, summaries.SCHEMA, approvals.SCHEMA, usage.SCHEMA, SCHEMA):  # a file of an older release
            migrate(conn, schema)
        with transaction(conn):
            deleted["history"] = _prune_history(conn, retention, now)
            deleted["summaries"] = _delete_before(conn, "session_summaries", "created_at", retention.before("summaries_days", now))
            deleted["approvals"] = _prune_approvals(conn, retention.before("approvals_days", now))
            deleted["usage"], rolled = _roll_up_usage(conn, retention.before("usage_days", now))
    trajectories = directory / f"{bot}.trajectories.sqlite3"
    cutoff = retention.before("trajectories_days", now)
    if cutoff is not None and trajectories.exists():
        with closing(connect(trajectories)) as conn:
            migrate(conn, sqlite_trajectories.SCHEMA)
            with transaction(conn):
                deleted["trajectories"] = _prune_trajectories(conn, cutoff)
    if compact:
        for path in (directory / f"{bot}.sqlite3", directory / f"{bot}.notes.sqlite3", trajectories):
            if path.exists():
                compact_file(path)
    if vectors:
        for index in (directory / f"{bot}.rag.hnsw", directory / f"{bot}.notes.sqlite3.hnsw"):
            for path in (index, index.with_name(index.name + ".sha256")):
                path.unlink(missing_ok=True)
    report = PruneReport(deleted, rolled, before, size_of(directory, bot), compact)
    _log.info("stores.pruned", bot=bot, deleted=deleted, rolled_up=rolled, bytes_before=before, bytes_after=report.bytes_after)
    return report


def compact_file(path: Path) -> None:
    """Merge the FTS5 indexes of the file at `path` into one segment each, copy it into its
    smallest form (VACUUM) and empty its WAL; a file another process holds busy is left as it is."""
    with closing(connect(path)) as conn:
        try:
            for table in _FTS_TABLES:
                if columns(conn, table):
                    conn.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.OperationalError as error:
            _log.warning("stores.compact_skipped", path=str(path), reason=str(error))


def _prune_history(conn: sqlite3.Connection, retention: Retention, now: datetime) -> int:
    removed = 0
    cutoff = retention.before("history_days", now)
    if cutoff is not None:
        old = f"{_CHAIN} IN (SELECT chain FROM history_activity WHERE last_at < ?)"
        for table in ("session_messages", "session_append_keys", "session_summaries"):
            count = conn.execute(f"DELETE FROM {table} WHERE {old}", (cutoff.timestamp(),)).rowcount
            removed += count if table == "session_messages" else 0
        conn.execute("DELETE FROM history_activity WHERE last_at < ?", (cutoff.timestamp(),))
    if retention.history_turns is not None:
        removed += _keep_turns(conn, retention.history_turns)
    return removed


def _keep_turns(conn: sqlite3.Connection, turns: int) -> int:
    """Delete each history's messages before its `turns`-th newest user message; its summaries
    then cover as many fewer messages, so what they leave out stays the same."""
    firsts = conn.execute(
        f"SELECT {_CHAIN}, id FROM (SELECT {SCOPE_COLUMNS_SQL}, id, row_number() OVER "
        f"(PARTITION BY {SCOPE_COLUMNS_SQL} ORDER BY id DESC) AS newest FROM session_messages WHERE role = 'user') "
        "WHERE newest = ?",
        (turns,),
    ).fetchall()
    removed = 0
    for chain, first_kept in firsts:
        values = json.loads(chain)
        count = conn.execute(f"DELETE FROM session_messages WHERE {SCOPE_MATCH} AND id < ?", (*values, first_kept)).rowcount
        conn.execute(f"UPDATE session_summaries SET covered = max(covered - ?, 0) WHERE {SCOPE_MATCH}", (count, *values))
        removed += count
    return removed


def _delete_before(conn: sqlite3.Connection, table: str, column: str, cutoff: datetime | None) -> int:
    if cutoff is None:
        return 0
    return conn.execute(f"DELETE FROM {table} WHERE julianday({column}) < julianday(?)", (cutoff.isoformat(),)).rowcount


def _prune_approvals(conn: sqlite3.Connection, cutoff: datetime | None) -> int:
    if cutoff is None:
        return 0
    return conn.execute(
        "DELETE FROM pending_approvals WHERE decision IS NOT NULL "
        "AND julianday(json_extract(pending, '$.request.created_at')) < julianday(?)",
        (cutoff.isoformat(),),
    ).rowcount


def _roll_up_usage(conn: sqlite3.Connection, cutoff: datetime | None) -> tuple[int, int]:
    """Replace the per-call rows of each whole day before `cutoff` by one row per day, tenant
    chain, session, model and priced-or-not, holding their sums and call count; (deleted, added)."""
    if cutoff is None:
        return 0, 0
    days = "day IN (SELECT DISTINCT day FROM usage_calls WHERE day < ? AND turn_id NOT LIKE 'day:%')"
    day = utc_text(cutoff)[:10]
    conn.execute("DROP TABLE IF EXISTS temp.usage_days")
    conn.execute(
        f"CREATE TEMP TABLE usage_days AS SELECT {SCOPE_COLUMNS_SQL}, day, model, cost IS NULL AS unpriced, "
        "sum(input_tokens) AS i, sum(output_tokens) AS o, sum(cache_read_tokens) AS r, sum(cache_write_tokens) AS w, "
        f"sum(cost) AS c, sum(calls) AS n FROM usage_calls WHERE {days} GROUP BY {SCOPE_COLUMNS_SQL}, day, model, unpriced",
        (day,),
    )
    deleted = conn.execute(f"DELETE FROM usage_calls WHERE {days}", (day,)).rowcount
    added = conn.execute(
        f"INSERT INTO usage_calls (turn_id, call_index, {SCOPE_COLUMNS_SQL}, at, day, model, input_tokens, output_tokens, "
        "cache_read_tokens, cache_write_tokens, cost, calls) "
        f"SELECT 'day:' || day, row_number() OVER (PARTITION BY day), {SCOPE_COLUMNS_SQL}, day || 'T00:00:00.000000Z', "
        "day, model, i, o, r, w, CASE WHEN unpriced THEN NULL ELSE c END, n FROM usage_days",
    ).rowcount
    conn.execute("DROP TABLE temp.usage_days")
    return deleted, added


def _prune_trajectories(conn: sqlite3.Connection, cutoff: datetime) -> int:
    """Delete the executions each session ran before its last distillation, when that is older
    than `cutoff`, and executions quarantined before `cutoff`."""
    removed = conn.execute(
        "DELETE FROM tool_executions WHERE seq IN (SELECT e.seq FROM tool_executions e JOIN "
        "(SELECT session_id, max(julianday(distilled_at)) AS last FROM distilled_trajectories GROUP BY session_id) d "
        "ON e.session_id = d.session_id WHERE d.last < julianday(?) AND e.started_ts <= (d.last - 2440587.5) * 86400.0)",
        (cutoff.isoformat(),),
    ).rowcount
    conn.execute("DELETE FROM quarantined_executions WHERE julianday(quarantined_at) < julianday(?)", (cutoff.isoformat(),))
    return removed
