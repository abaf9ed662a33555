"""The embedded TrajectoryStore: captured tool executions in a SQLite file (WAL)."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentloop.adapters._rows import json_text, rows
from agentloop.adapters.sqlite._connection import closing_on_error, connect, transaction
from agentloop.adapters.sqlite.schema import Schema, Step, add_missing_columns, has_table, migrate, rebuild
from agentloop.components import ToolExecution
from agentloop.notes.errors import ExecutionRefusedError
from agentloop.notes.capture import cut_quarantine_record, quarantine_record
from agentloop.notes.models import Trajectory
from agentloop.scopes import Scope
from agentloop.adapters.sqlite._thread import OnItsThread
from agentloop.adapters.sqlite._subjects import Table, delete_rows, export_page, export_rows, subject_indexes
from agentloop.adapters._subjects import EXECUTIONS, SESSION_ONLY
from agentloop.privacy import Subject

_COLUMNS = (
    "id, session_id, parent_id, user_id, project_id, tool_name, arguments, result, error, "
    "started_at, started_ts, duration_ms, context_snapshot, org_id, team_id, step_id, company_id"
)
_ONE_INDEX = (
    """CREATE TABLE tool_executions (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        parent_id TEXT,
        user_id TEXT,
        project_id TEXT,
        tool_name TEXT NOT NULL,
        arguments TEXT NOT NULL,
        result TEXT,
        error TEXT,
        started_at TEXT NOT NULL,
        started_ts REAL NOT NULL,
        duration_ms REAL NOT NULL,
        context_snapshot TEXT NOT NULL,
        org_id TEXT,
        team_id TEXT,
        step_id TEXT,
        company_id TEXT NOT NULL DEFAULT 'default'
    )""",
    "CREATE UNIQUE INDEX tool_executions_by_session_start ON tool_executions (session_id, started_ts, id)",
)
"""The executions table with a single index. A new execution lands at the end of its session's
run of that index (a session's executions start in order), so a batch dirties about one index
page per session, where an index on the id (a random uuid) would dirty one page per execution,
and writing those pages out is most of a batch's cost."""

TABLES = (
    Table("execution", "tool_executions", EXECUTIONS, key="seq"),
    Table("distilled", "distilled_trajectories", SESSION_ONLY),
    Table("quarantined", "quarantined_executions", SESSION_ONLY),
)
"""What an erase or export of trajectories covers: a distilled or quarantined row names its session only."""
SCHEMA = Schema(
    "trajectories",
    (
        Step(
            "tool executions and distilled trajectories (release 0.1)",
            (
                """CREATE TABLE IF NOT EXISTS tool_executions (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    id TEXT NOT NULL UNIQUE,
                    session_id TEXT NOT NULL,
                    parent_id TEXT,
                    user_id TEXT,
                    project_id TEXT,
                    tool_name TEXT NOT NULL,
                    arguments TEXT NOT NULL,
                    result TEXT,
                    error TEXT,
                    started_at TEXT NOT NULL,
                    started_ts REAL NOT NULL,
                    duration_ms REAL NOT NULL,
                    context_snapshot TEXT NOT NULL
                )""",
                "CREATE INDEX IF NOT EXISTS tool_executions_by_session ON tool_executions (session_id, started_ts, seq)",
                """CREATE TABLE IF NOT EXISTS distilled_trajectories (
                    hash TEXT PRIMARY KEY,
                    session_id TEXT NOT NULL,
                    note_id INTEGER NOT NULL,
                    distilled_at TEXT NOT NULL
                )""",
            ),
        ),
        Step(
            # NULL on earlier rows, except the company: the default one (one deployment per file then).
            "each execution keeps its org, team, company and task step",
            run=lambda conn: add_missing_columns(
                conn,
                "tool_executions",
                {"org_id": "TEXT", "team_id": "TEXT", "step_id": "TEXT", "company_id": "TEXT NOT NULL DEFAULT 'default'"},
            ),
        ),
        Step(
            "executions the store refused are kept in quarantine",
            (
                """CREATE TABLE IF NOT EXISTS quarantined_executions (
                    id TEXT NOT NULL,
                    session_id TEXT NOT NULL,
                    tool_name TEXT NOT NULL,
                    reason TEXT NOT NULL,
                    execution TEXT NOT NULL,
                    quarantined_at TEXT NOT NULL
                )""",
            ),
        ),
        Step(
            "one index, by session, start and id, both orders a session's executions and keeps each stored once",
            run=lambda conn: rebuild(
                conn,
                "tool_executions",
                _ONE_INDEX,
                lambda old: conn.execute(f"INSERT INTO tool_executions (seq, {_COLUMNS}) SELECT seq, {_COLUMNS} FROM {old}"),
            ),
        ),
        Step(
            "executions by user, distilled and quarantined rows by session, so erasing one reads only theirs",
            subject_indexes(*TABLES[1:]).sql + ("CREATE INDEX tool_executions_by_user ON tool_executions (user_id)",),
        ),
    ),
    has_table("tool_executions"),
)
_NULLABLE = frozenset({"parent_id", "user_id", "project_id", "result", "error", "org_id", "team_id", "step_id"})
_NULL = 0
"""What `_add_row` binds for None: sqlite3 binds an int at once but looks None up as a value
that may need adapting (two failed attribute lookups, 0.3 us each, with the GIL held), and
`NULLIF(?, 0)` makes the 0 a NULL again (a text, even '0', never equals the integer 0)."""
_ROW = "(" + ", ".join("NULLIF(?, 0)" if column in _NULLABLE else "?" for column in _COLUMNS.split(", ")) + ")"
ROWS_PER_INSERT = 256
"""Most executions one INSERT holds: a statement of thousands of rows costs more to compile
than its steps save (one INSERT of 40,000 rows ran at 81,000 rows/s, 256 at a time 120,000)."""


def _add_row(values: list[object], e: ToolExecution) -> None:
    """Add the column values of `e`, in `_COLUMNS` order, to the INSERT's parameters: the rows
    converter's spelling (dicts as JSON, the time as ISO text) written out, as the capture writer
    pays for it per execution, and `_NULL` for None."""
    started = e.started_at
    values += (
        e.id, e.session_id, _NULL if e.parent_id is None else e.parent_id, _NULL if e.user_id is None else e.user_id,
        _NULL if e.project_id is None else e.project_id, e.tool_name, json_text(e.arguments),
        _NULL if e.result is None else e.result, _NULL if e.error is None else e.error, started.isoformat(),
        started.timestamp(), e.duration_ms, json_text(e.context_snapshot), _NULL if e.org_id is None else e.org_id,
        _NULL if e.team_id is None else e.team_id, _NULL if e.step_id is None else e.step_id, e.company_id,
    )


def _execution(row: sqlite3.Row) -> ToolExecution:
    return rows.structure(dict(row), ToolExecution)


class SqliteTrajectoryStore:
    """Tool executions and distilled-trajectory hashes; the schema is made on first use.

    Arguments and context snapshots are stored as JSON (values JSON cannot hold are
    stored as their `str`). Each row keeps the session's company, org, team, project and
    user; a table from an earlier release gains those columns (company "default", the
    rest NULL), so its rows are read only by a default-company chain without org and team.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn = connect(self.path)
        self._conn.row_factory = sqlite3.Row
        with closing_on_error(self._conn):
            migrate(self._conn, SCHEMA)

    def append(self, executions: Sequence[ToolExecution]) -> None:
        try:
            self._append(executions)
        except (sqlite3.DataError, sqlite3.IntegrityError) as exc:
            raise ExecutionRefusedError(
                f"the trajectory store refuses this batch of {len(executions)} tool executions "
                f"for what one of them holds ({exc}); it will never take that execution as it is"
            ) from exc

    def _append(self, executions: Sequence[ToolExecution]) -> None:
        """One INSERT per `ROWS_PER_INSERT` executions (fewer if SQLite takes fewer parameters),
        not one per execution: sqlite3 lets go of the GIL and takes it back at each statement
        step, and a writer thread that takes it back from a busy event loop makes that loop wait."""
        per_insert = min(ROWS_PER_INSERT, self._conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // _ROW.count("?"))
        statements = []
        for start in range(0, len(executions), per_insert):
            chunk = executions[start : start + per_insert]
            values: list[object] = []
            for execution in chunk:
                _add_row(values, execution)
            statements.append((f"INSERT OR IGNORE INTO tool_executions ({_COLUMNS}) VALUES {','.join([_ROW] * len(chunk))}", values))
        with self._lock, transaction(self._conn):
            for statement, values in statements:
                self._conn.execute(statement, values)

    def load(self, session_id: str, scope: Scope | None = None) -> Trajectory:
        where, params = "session_id = ?", [session_id]  # type: tuple[str, list[str | None]]
        if scope is not None:
            where += " AND company_id = ? AND org_id IS ? AND team_id IS ? AND project_id IS ? AND user_id IS ?"
            params += [scope.company_id, scope.org_id, scope.team_id, scope.project_id, scope.user_id]
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_COLUMNS} FROM tool_executions WHERE {where} ORDER BY started_ts, seq", params
            ).fetchall()
        return Trajectory(session_id, tuple(_execution(row) for row in rows))

    def quarantine(self, execution: ToolExecution, reason: str) -> None:
        record = quarantine_record(execution, reason)
        try:
            self._keep(record)
        except sqlite3.DataError:  # too large for the store: keep its start, marked as cut
            self._keep(cut_quarantine_record(record))

    def _keep(self, record: dict[str, str]) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT INTO quarantined_executions (id, session_id, tool_name, reason, execution, quarantined_at) "
                "VALUES (?,?,?,?,?,?)",
                (
                    record["id"], record["session_id"], record["tool_name"], record["reason"], record["execution"],
                    datetime.now(UTC).isoformat(),
                ),
            )

    def quarantined(self) -> list[dict[str, str]]:
        """The kept executions the store refused, oldest first: id, session, tool and reason
        backslash-escaped to ASCII, and the whole execution as ASCII JSON."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT id, session_id, tool_name, reason, execution FROM quarantined_executions ORDER BY rowid"
            ).fetchall()
        return [dict(row) for row in rows]

    def count(self) -> int:
        with self._lock:
            (n,) = self._conn.execute("SELECT count(*) FROM tool_executions").fetchone()
        return int(n)

    def mark_distilled(self, trajectory_hash: str, session_id: str, note_id: int, at: datetime) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR IGNORE INTO distilled_trajectories (hash, session_id, note_id, distilled_at) VALUES (?,?,?,?)",
                (trajectory_hash, session_id, note_id, at.isoformat()),
            )

    def is_distilled(self, trajectory_hash: str) -> bool:
        with self._lock:
            row = self._conn.execute("SELECT 1 FROM distilled_trajectories WHERE hash = ?", (trajectory_hash,)).fetchone()
        return row is not None

    def erase(self, subject: Subject) -> int:
        """Delete `subject`'s rows, in one transaction; how many."""
        with self._lock, transaction(self._conn):
            removed = delete_rows(self._conn, subject, TABLES)
            # The notes an erase removes: other sessions that led to them are distilled again.
            return removed + self._conn.execute(
                "DELETE FROM distilled_trajectories WHERE note_id IN (SELECT value FROM json_each(?))",
                (json.dumps(sorted(subject.notes)),),
            ).rowcount

    def export_page(self, subject: Subject, table: Table, after: object) -> list[dict[str, Any]]:
        return export_page(self._conn, self._lock, subject, table, after)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class AsyncSqliteTrajectoryStore(OnItsThread[SqliteTrajectoryStore]):
    """The TrajectoryStore port on a `SqliteTrajectoryStore` (`engine`).

    Every call, reads too, runs on the store's thread: the capture writer appends from its
    own thread at any moment, so a read on the loop could wait there for its lock.
    """

    async def append(self, executions: Sequence[ToolExecution]) -> None:
        await self._thread.run(self.engine.append, executions)

    async def load(self, session_id: str, scope: Scope | None = None) -> Trajectory:
        return await self._thread.run(self.engine.load, session_id, scope)

    async def quarantine(self, execution: ToolExecution, reason: str) -> None:
        await self._thread.run(self.engine.quarantine, execution, reason)

    async def quarantined(self) -> list[dict[str, str]]:
        return await self._thread.run(self.engine.quarantined)

    async def count(self) -> int:
        return await self._thread.run(self.engine.count)

    async def mark_distilled(self, trajectory_hash: str, session_id: str, note_id: int, at: datetime) -> None:
        await self._thread.run(self.engine.mark_distilled, trajectory_hash, session_id, note_id, at)

    async def is_distilled(self, trajectory_hash: str) -> bool:
        return await self._thread.run(self.engine.is_distilled, trajectory_hash)

    async def erase(self, subject: Subject) -> int:
        return await self._thread.write(self.engine.erase, subject)

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        return export_rows(self._thread, self.engine.export_page, subject, TABLES)
