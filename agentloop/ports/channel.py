"""The Channel port: how responses reach a user."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from agentloop.outcome import Attachment

if TYPE_CHECKING:
    from agentloop.context import Session


@runtime_checkable
class Channel(Protocol):
    """Each method raises `TransportError` (user-safe message) when delivery fails."""

    async def send_text(self, session: Session, text: str, hints: dict[str, str]) -> None: ...

    async def send_voice(self, session: Session, text: str) -> None: ...

    async def send_attachment(self, session: Session, attachment: Attachment) -> None: ...
