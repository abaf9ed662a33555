"""The Channel port: how responses reach a user."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from agentloop.context import Session
from agentloop.outcome import Attachment


@runtime_checkable
class Channel(Protocol):
    """Each method raises `TransportError` (user-safe message) when delivery fails."""

    async def send_text(self, session: Session, text: str, hints: dict[str, str]) -> None: ...

    async def send_voice(self, session: Session, text: str) -> None: ...

    async def send_attachment(self, session: Session, attachment: Attachment) -> None: ...
