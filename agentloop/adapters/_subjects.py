"""`Subject.matches` in SQL, for the SQLite and PostgreSQL stores: one WHERE clause per table shape.

A table names its tenant chain in up to six columns (`Columns`), any of them missing; a
row of a subject's session is matched by its session column, or by `session_column` when
the table keeps the session apart from its scope (memory, RAG, approvals).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from agentloop.adapters._rows import SCOPE_COLUMNS
from agentloop.privacy import Subject, SubjectKind


@attrs.frozen
class Columns:
    """The columns of a table holding each part of a row's chain (None: the table has none)."""

    company: str | None
    org: str | None
    team: str | None = None
    project: str | None = None
    user: str | None = None
    session: str | None = None


SCOPED = Columns(*SCOPE_COLUMNS)
"""The six scope columns of history, memory, RAG, approvals, summaries and usage."""
EXECUTIONS = Columns("company_id", "org_id", "team_id", "project_id", "user_id", "session_id")
"""The chain columns of captured tool executions."""
SESSION_ONLY = Columns(None, None, session="session_id")
"""A table that names a row's session and nothing else of its chain (distilled trajectories, quarantine)."""
NO_CHAIN = Columns(None, None)
"""A table whose rows belong to a subject only through the notes distilled from its sessions."""
NOTES = Columns("company_id", "org_id")
"""Knowledge items: a note belongs to a subject through its sessions, and only within the subject's company and org."""


@attrs.frozen
class Dialect:
    """How one SQL dialect spells a parameter, a NULL-safe equality and membership in a list."""

    mark: str
    same: str
    postgres: bool

    def members(self, column: str, values: frozenset[Any]) -> list[tuple[str, list[Any]]]:
        """Conditions (with parameters) that together hold `column`'s rows with one of `values`: one
        array on PostgreSQL; on SQLite lists of at most `LISTED` marks, which its planner reads
        through the column's index (a list it cannot count, such as json_each, it may scan past)."""
        ordered = sorted(values)
        if self.postgres:
            return [(f"{column} = ANY({self.mark})", [ordered])]
        chunks = [ordered[start : start + LISTED] for start in range(0, len(ordered), LISTED)]
        return [(f"{column} IN ({', '.join(self.mark * len(chunk))})", list(chunk)) for chunk in chunks]


LISTED = 500
"""The most values one SQLite IN list holds (its limit on parameters is far above)."""
SQLITE = Dialect("?", "IS", postgres=False)
POSTGRES = Dialect("%s", "IS NOT DISTINCT FROM", postgres=True)


def subject_clauses(
    subject: Subject, columns: Columns, dialect: Dialect, *, session_column: str | None = None, note_column: str | None = None
) -> list[tuple[str, list[Any]]]:
    """WHERE clauses (each with its parameters) whose union is exactly the rows of `subject` in a
    table of `columns`: its own chain's, each session column's, and the rows of the notes distilled
    from its sessions (`note_column`). Each reads one index."""
    mark, chain_params = dialect.mark, [subject.company_id, subject.org_id]
    chain = f"{columns.company} = {mark} AND {columns.org} {dialect.same} {mark}"
    # Where a user or session picks the rows, SQLite must look them up by it: `+` keeps its planner,
    # which has no statistics, off the chain's indexes (they hold every user of the org).
    checked = chain if dialect.postgres else f"+{columns.company} = {mark} AND +{columns.org} {dialect.same} {mark}"
    if columns.company is None or columns.org is None:  # the table names sessions only
        chain, checked, chain_params = "TRUE", "TRUE", []
    clauses: list[tuple[str, list[Any]]] = []
    chained = columns.company is not None
    if chained and (subject.kind is SubjectKind.CHAIN or (subject.kind is SubjectKind.USER and columns.user is not None)):
        parts, params = [chain if subject.kind is SubjectKind.CHAIN else checked], list(chain_params)
        if subject.kind is SubjectKind.USER:
            parts.insert(0, f"{columns.user} = {mark}")
            params.insert(0, subject.user_id)
        for wanted, column in ((subject.team_id, columns.team), (subject.project_id, columns.project)):
            if wanted is None:
                continue
            if column is None:
                parts.append("FALSE")
                continue
            loose = f"{column} IS NULL OR " if subject.kind is SubjectKind.USER else ""
            parts.append(f"({loose}{column} = {mark})")
            params.append(wanted)
        clauses.append((" AND ".join(parts), params))
    # A user's rows that name the user are the clause above's; its sessions' are those that name none.
    plus = "" if dialect.postgres else "+"
    unnamed = f" AND {plus}{columns.user} IS NULL" if subject.kind is SubjectKind.USER and columns.user is not None else ""
    for column in (columns.session, session_column):
        if column is not None and subject.sessions:
            for member, values in dialect.members(column, subject.sessions):
                clauses.append((f"{member} AND {checked}{unnamed}", [*values, *chain_params]))
    if note_column is not None and subject.notes:
        if chained:  # a note of another tenant's session of the same id is not the subject's
            clauses.extend((f"{member} AND {chain}", [*values, *chain_params]) for member, values in dialect.members(note_column, subject.notes))
        else:
            clauses.extend(dialect.members(note_column, subject.notes))
    return clauses


def subject_where(
    subject: Subject, columns: Columns, dialect: Dialect, *, session_column: str | None = None, note_column: str | None = None
) -> tuple[str, list[Any]]:
    """One WHERE clause (and its parameters) true exactly for the rows of `subject` in a table of `columns`."""
    return joined(subject_clauses(subject, columns, dialect, session_column=session_column, note_column=note_column))


def joined(clauses: Sequence[tuple[str, Sequence[Any]]]) -> tuple[str, list[Any]]:
    """`clauses` as one WHERE clause true for the rows of any of them (FALSE for none), and its parameters."""
    if not clauses:
        return "FALSE", []
    return " OR ".join(f"({clause})" for clause, _ in clauses), [param for _, params in clauses for param in params]
