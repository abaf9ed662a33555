"""The embedded Channel: a terminal. Voice and files are shown as labelled lines."""

from __future__ import annotations

import sys
from typing import TextIO

from agentloop.context import Session
from agentloop.errors import TransportError
from agentloop.outcome import Attachment


class ConsoleChannel:
    """Writes each response to `stream` (stdout by default), prefixed by `prompt`."""

    def __init__(self, stream: TextIO | None = None, *, prompt: str = "bot> ") -> None:
        self._stream = stream
        self.prompt = prompt

    def _write(self, line: str) -> None:
        stream = self._stream if self._stream is not None else sys.stdout
        try:
            stream.write(f"{self.prompt}{line}\n")
            stream.flush()
        except (OSError, ValueError) as exc:
            raise TransportError("the terminal is closed; the response could not be shown") from exc

    async def send_text(self, session: Session, text: str, hints: dict[str, str]) -> None:
        self._write(text)

    async def send_voice(self, session: Session, text: str) -> None:
        self._write(f"[voice] {text}")

    async def send_attachment(self, session: Session, attachment: Attachment) -> None:
        where = attachment.url or f"{len(attachment.data)} bytes"
        self._write(f"[file] {attachment.name} ({attachment.media_type}, {where})")
