"""The embedded attempt-notes store: one Markdown file `TASK-<id>.md` per task in a directory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agentloop.adapters._private_files import private_file, private_folder
from agentloop.privacy import Subject


class FileAttemptNotes:
    """`AttemptNotesStore` over a directory; file I/O runs on a worker thread, off the event loop."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def path(self, task_id: str) -> Path:
        return self.directory / f"TASK-{task_id}.md"

    async def read(self, task_id: str) -> str | None:
        return await asyncio.to_thread(self._read, task_id)

    async def append(self, task_id: str, text: str) -> None:
        await asyncio.to_thread(self._append, task_id, text)

    async def remove(self, task_id: str) -> bool:
        return await asyncio.to_thread(self._remove, task_id)

    async def erase(self, subject: Subject) -> int:
        """Remove the texts of the subject's tasks (`Subject.tasks`); how many there were."""
        return sum([await self.remove(task_id) for task_id in sorted(subject.tasks)])

    async def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        for task_id in sorted(subject.tasks):
            text = await self.read(task_id)
            if text is not None:
                yield {"kind": "attempt_notes", "task_id": task_id, "text": text}

    def _read(self, task_id: str) -> str | None:
        try:
            return self.path(task_id).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def _append(self, task_id: str, text: str) -> None:
        private_folder(self.directory)
        private_file(self.path(task_id))
        with self.path(task_id).open("a", encoding="utf-8") as handle:
            handle.write(text)

    def _remove(self, task_id: str) -> bool:
        try:
            self.path(task_id).unlink()
        except FileNotFoundError:
            return False
        return True
