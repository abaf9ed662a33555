"""Tenant scopes as PostgreSQL columns: every row keeps its `Scope` as six columns, and a
read matches all six inside its WHERE clause (the one rule of `agentloop.scopes`)."""

from __future__ import annotations

from collections.abc import Sequence

from agentloop.adapters._rows import SCOPE_COLUMNS, scope_values
from agentloop.scopes import Scope

SCOPE_COLUMNS_SQL = ", ".join(SCOPE_COLUMNS)
SCOPE_COLUMNS_DDL = ", ".join(f"{column} text" + (" NOT NULL" if column == SCOPE_COLUMNS[0] else "") for column in SCOPE_COLUMNS)
SCOPE_MARKS = ", ".join("%s" for _ in SCOPE_COLUMNS)


def scope_match(scope: Scope) -> tuple[str, list[str]]:
    """A WHERE condition true exactly for rows of `scope`, and its parameters."""
    return columns_match(SCOPE_COLUMNS, scope_values(scope))


def columns_match(columns: Sequence[str], values: Sequence[str | None]) -> tuple[str, list[str]]:
    """A WHERE condition true exactly for rows whose `columns` hold `values`, and its parameters.

    A missing part is `IS NULL` rather than `IS NOT DISTINCT FROM %s`, so a btree index
    on the columns serves the match.
    """
    conditions, params = [], []
    for column, value in zip(columns, values, strict=True):
        if value is None:
            conditions.append(f"{column} IS NULL")
        else:
            conditions.append(f"{column} = %s")
            params.append(value)
    return " AND ".join(conditions), params


def row_scope(values: Sequence[str | None]) -> Scope:
    """The scope whose columns, in `SCOPE_COLUMNS` order, are `values`."""
    company, *rest = values
    return Scope(str(company), *rest)
