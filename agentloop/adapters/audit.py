"""The in-memory AuditLog, and how every backend writes an `AuditRecord` as a row (ids and counts as JSON)."""

from __future__ import annotations

import json
import threading
from datetime import datetime
from typing import Any

from agentloop.privacy import AuditRecord


def audit_row(record: AuditRecord) -> tuple[str, str, str, str, str]:
    """The columns of an audit row: actor, action, subject (JSON), time (ISO, UTC) and counts (JSON)."""
    return record.actor, record.action, json.dumps(record.subject), record.at.isoformat(), json.dumps(record.counts)


def audit_record(actor: str, action: str, subject: Any, at: Any, counts: Any) -> AuditRecord:
    """The record an audit row holds (JSON given as text or already decoded, a time as ISO text or a datetime)."""
    return AuditRecord(
        actor, action, json.loads(subject) if isinstance(subject, str) else subject,
        at if isinstance(at, datetime) else datetime.fromisoformat(at), json.loads(counts) if isinstance(counts, str) else counts,
    )


class MemoryAuditLog:
    """Audit records in a list, for a backend held in memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[AuditRecord] = []

    async def record(self, record: AuditRecord) -> None:
        with self._lock:
            self._records.append(record)

    async def records(self) -> list[AuditRecord]:
        with self._lock:
            return list(self._records)
