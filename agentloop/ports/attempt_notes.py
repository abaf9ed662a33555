"""The AttemptNotesStore port: the text kept across attempts of one task, by task id."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol, runtime_checkable

from agentloop.privacy import Subject


@runtime_checkable
class AttemptNotesStore(Protocol):
    """One growing text per task; every call is a coroutine.

    How an attempt's section is numbered and formatted is `AttemptNotes`' business; the
    store keeps the text, appends to it and forgets it. Task ids are checked by the caller.
    """

    async def read(self, task_id: str) -> str | None:
        """The task's text, or None if it has none."""
        ...

    async def append(self, task_id: str, text: str) -> None:
        """Add `text` at the end of the task's text (creating it), atomically."""
        ...

    async def remove(self, task_id: str) -> bool:
        """Forget the task's text; True if there was any."""
        ...

    async def erase(self, subject: Subject) -> int:
        """Remove every row of `subject` (`agentloop.privacy`) in one transaction; how many (0 when run again)."""
        ...

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        """Every row kept about `subject`, one JSON-ready record at a time (docs/privacy.md gives each shape)."""
        ...
