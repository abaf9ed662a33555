"""The server's channel: each session's deltas and messages go to the HTTP request waiting on it."""

from __future__ import annotations

import asyncio
from typing import Any

from agentloop.context import Session
from agentloop.outcome import Attachment
from agentloop.ports.channel import MessageStream

Event = tuple[str, dict[str, Any]]
"""An SSE event for the client: its name (delta, reset, text) and its JSON data."""


class _Stream:
    """One answer streamed to the session's listener, if any."""

    def __init__(self, channel: HttpChannel, session_id: str) -> None:
        self._channel = channel
        self._session_id = session_id

    async def delta(self, text: str) -> None:
        self._channel.publish(self._session_id, ("delta", {"text": text}))

    async def close(self, final_text: str) -> None:
        self._channel.publish(self._session_id, ("text", {"text": final_text}))

    async def abort(self, reason: str) -> None:
        self._channel.publish(self._session_id, ("reset", {"reason": reason}))


class HttpChannel:
    """A `StreamingChannel` that routes what a turn sends to the listener of its session.

    The server runs one turn per session at a time and listens to the session for that
    turn, so what the turn streams reaches the request that started it. With no listener
    (the client went away) what is sent is dropped: the turn's outcome and history keep it.
    Voice and attachments are not carried over HTTP; the outcome's text is.
    """

    def __init__(self) -> None:
        self._listeners: dict[str, asyncio.Queue[Event]] = {}

    def listen(self, session_id: str) -> asyncio.Queue[Event]:
        """Start receiving what is sent to `session_id` (replacing an earlier listener)."""
        queue: asyncio.Queue[Event] = asyncio.Queue()
        self._listeners[session_id] = queue
        return queue

    def stop_listening(self, session_id: str, queue: asyncio.Queue[Event]) -> None:
        if self._listeners.get(session_id) is queue:
            del self._listeners[session_id]

    def publish(self, session_id: str, event: Event) -> None:
        queue = self._listeners.get(session_id)
        if queue is not None:
            queue.put_nowait(event)

    async def open_stream(self, session: Session, hints: dict[str, str]) -> MessageStream:
        return _Stream(self, session.id)

    async def send_text(self, session: Session, text: str, hints: dict[str, str]) -> None:
        self.publish(session.id, ("text", {"text": text}))

    async def send_voice(self, session: Session, text: str) -> None:
        return None

    async def send_attachment(self, session: Session, attachment: Attachment) -> None:
        return None
