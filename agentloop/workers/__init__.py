"""Several workers on one bot: a durable inbox in PostgreSQL (procrastinate jobs) and the
workers that run its turns, one session at a time across processes, each message
answered once whichever worker dies."""

from typing import TYPE_CHECKING

from agentloop._deprecated import renamed_names
from agentloop.workers.errors import (
    InboxUrlError,
    MessageIdConflictError,
    MessageNotAnsweredError,
    TurnNotStoredError,
    UnknownMessageError,
)
from agentloop.workers.inbox import (
    SCHEMA_VERSION,
    Inbox,
    MessageResult,
    PendingTurn,
    migrate_inbox,
    open_inbox,
    queue_name,
    session_lock,
)
from agentloop.workers.erasure import erase_inbox, export_inbox
from agentloop.workers.worker import WorkerSettings, reclaim_stalled, run_worker

__all__ = [
    "SCHEMA_VERSION",
    "Inbox",
    "InboxUrlError",
    "MessageIdConflictError",
    "MessageNotAnsweredError",
    "MessageResult",
    "PendingTurn",
    "TurnNotStoredError",
    "UnknownMessageError",
    "WorkerSettings",
    "erase_inbox",
    "export_inbox",
    "migrate_inbox",
    "open_inbox",
    "queue_name",
    "reclaim_stalled",
    "run_worker",
]

if not TYPE_CHECKING:  # type checkers report the old names, which is the point
    __getattr__ = renamed_names(__name__, {"MessageIdConflict": "agentloop.workers.MessageIdConflictError"})
