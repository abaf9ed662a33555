"""The embedded Channel: a terminal. Voice and files are shown as labelled lines; answers stream."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

from agentloop.context import Session
from agentloop.errors import TransportError
from agentloop.outcome import Attachment
from agentloop.terminal import terminal_text

CUT_OFF_MARK = " [cut off]"
"""Ends the line of a streamed answer that was withdrawn; the turn's fallback follows on its own line."""


class ConsoleChannel:
    """Writes each response to `stream` (stdout by default), prefixed by `prompt`.

    A streamed answer is printed token by token on one line. When it closes with the same
    text, the line just ends; when the final text differs (the model's answer was replaced),
    the final text follows on a line of its own; a withdrawn answer ends with ` [cut off]`.
    `before_output` is called before anything is written (the chat command clears its
    waiting spinner with it). Control characters in what the bot says are shown escaped
    (`agentloop.terminal`), so an answer cannot drive the terminal.
    """

    def __init__(
        self, stream: TextIO | None = None, *, prompt: str = "bot> ", before_output: Callable[[], None] | None = None
    ) -> None:
        self._stream = stream
        self.prompt = prompt
        self._before_output = before_output

    def _emit(self, text: str) -> None:
        if self._before_output is not None:
            self._before_output()
        stream = self._stream if self._stream is not None else sys.stdout
        try:
            stream.write(terminal_text(text))
            stream.flush()
        except (OSError, ValueError) as exc:
            raise TransportError("the terminal is closed; the response could not be shown") from exc

    def _write(self, line: str) -> None:
        self._emit(f"{self.prompt}{line}\n")

    async def send_text(self, session: Session, text: str, hints: dict[str, str]) -> None:
        self._write(text)

    async def send_voice(self, session: Session, text: str) -> None:
        self._write(f"[voice] {text}")

    async def send_attachment(self, session: Session, attachment: Attachment) -> None:
        where = attachment.url or f"{len(attachment.data)} bytes"
        self._write(f"[file] {attachment.name} ({attachment.media_type}, {where})")

    async def open_stream(self, session: Session, hints: dict[str, str]) -> _ConsoleMessage:
        return _ConsoleMessage(self)


class _ConsoleMessage:
    """One answer printed while the model writes it."""

    def __init__(self, console: ConsoleChannel) -> None:
        self._console = console
        self._shown = ""

    async def delta(self, text: str) -> None:
        self._console._emit(text if self._shown else f"{self._console.prompt}{text}")
        self._shown += text

    async def close(self, final_text: str) -> None:
        if self._shown == final_text:
            self._console._emit("\n")
        elif self._shown:
            self._console._emit("\n")
            self._console._write(final_text)
        else:
            self._console._write(final_text)

    async def abort(self, reason: str) -> None:
        if self._shown:
            self._console._emit(f"{CUT_OFF_MARK}\n")
