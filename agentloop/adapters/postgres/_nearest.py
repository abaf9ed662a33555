"""Cosine search through pgvector with the caller's filter inside the query."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from agentloop.ports.vectors import Vectors

EF_SEARCH = 100
"""Candidates the HNSW scan visits (`hnsw.ef_search`, pgvector's default 40), set on every pooled connection:
pgvector's default misses too many neighbours; the recall and latency of each setting are in docs/performance.md."""


def nearest_query(columns: str, table: str, vector_column: str, where: str, *, exact: bool) -> str:
    """The search `nearest` runs, taking (vector, *where's parameters, vector, k): through the
    HNSW index, or with `exact` as a scan of the rows `where` selects (the `+ 0` keeps the
    planner off the vector index)."""
    return (
        f"SELECT {columns}, 1 - ({vector_column} <=> %s) FROM {table} WHERE {where} "
        f"ORDER BY ({vector_column} <=> %s){' + 0' if exact else ''} LIMIT %s"
    )


async def nearest(
    conn: psycopg.AsyncConnection[Any],
    columns: str,
    table: str,
    vector_column: str,
    where: str,
    params: Sequence[object],
    vector: Vectors,
    k: int,
) -> list[tuple[Any, ...]]:
    """Up to `k` rows of `table` matching `where`, nearest `vector` first: `columns` then
    the cosine similarity.

    The HNSW index answers first. It visits a bounded number of candidates and the
    filter drops those of other tenants, so when it returns fewer than `k` rows (a small
    tenant in a large table) the same query runs again as an exact scan.
    """
    values = (vector, *params, vector, k)
    rows: list[tuple[Any, ...]] = await (
        await conn.execute(nearest_query(columns, table, vector_column, where, exact=False), values)
    ).fetchall()
    if len(rows) < k:
        rows = await (await conn.execute(nearest_query(columns, table, vector_column, where, exact=True), values)).fetchall()
    return rows
