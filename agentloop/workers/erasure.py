"""Erase and export of a subject's finished inbox messages (and their procrastinate jobs) on PostgreSQL.

A message still waiting or running is left alone: its turn completes and stores its rows, which an
erase run after it removes. The inbox keeps no company (one deployment per database), so a subject's
company is not matched here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from agentloop.privacy import Subject, SubjectKind
from agentloop.workers.inbox import _connect

_FINISHED = "bot = %s AND finished_at IS NOT NULL"
_EXPORTED = ("message_id", "session", "message", "submitted_at", "finished_at", "outcome", "error")


def _where(subject: Subject) -> tuple[str, list[Any]]:
    """A WHERE clause for the inbox rows of `subject`, read from each message's session."""
    parts, params = ["session ->> 'org_id' IS NOT DISTINCT FROM %s"], list[Any]([subject.org_id])
    loose = subject.kind is SubjectKind.USER
    for wanted, part in ((subject.team_id, "team_id"), (subject.project_id, "project_id")):
        if wanted is not None:
            parts.append(f"(session ->> '{part}' IS NULL OR session ->> '{part}' = %s)" if loose else f"session ->> '{part}' = %s")
            params.append(wanted)
    own = "FALSE"
    if subject.kind is SubjectKind.USER:
        own, params = "session ->> 'user_id' = %s", [*params, subject.user_id]
    elif subject.kind is SubjectKind.CHAIN:
        own = "TRUE"
    if subject.sessions:
        own, params = f"({own} OR session ->> 'id' = ANY(%s))", [*params, sorted(subject.sessions)]
    return " AND ".join([*parts, own]), params


async def erase_inbox(url: str, bot: str, subject: Subject) -> int:
    """Delete `subject`'s finished messages from `bot`'s inbox and their finished jobs, in one transaction; how many messages."""
    where, params = _where(subject)
    async with await _connect(url) as conn, conn.transaction():
        cursor = await conn.execute(f"DELETE FROM agentloop_inbox WHERE {_FINISHED} AND {where} RETURNING job_id", [bot, *params])
        jobs = [job for (job,) in await cursor.fetchall()]
        await conn.execute(
            "DELETE FROM procrastinate_jobs WHERE id = ANY(%s) AND status NOT IN ('todo', 'doing')",
            ([job for job in jobs if job is not None],),
        )
    return len(jobs)


async def export_inbox(url: str, bot: str, subject: Subject) -> AsyncIterator[dict[str, Any]]:
    """`subject`'s finished messages in `bot`'s inbox, oldest first, as export records."""
    where, params = _where(subject)
    async with await _connect(url) as conn, conn.cursor() as cursor:
        await cursor.execute(
            f"SELECT {', '.join(_EXPORTED)} FROM agentloop_inbox WHERE {_FINISHED} AND {where} ORDER BY submitted_at",
            [bot, *params],
        )
        async for row in cursor:
            yield {"store": "inbox", "kind": "message"} | {
                name: value.isoformat() if hasattr(value, "isoformat") else value for name, value in zip(_EXPORTED, row, strict=True)
            }
