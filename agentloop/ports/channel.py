"""The Channel port: how responses reach a user."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from agentloop.outcome import Attachment

if TYPE_CHECKING:
    from agentloop.context import Session


@runtime_checkable
class MessageStream(Protocol):
    """One message delivered while it is written: provisional deltas, then its final text.

    `close` replaces what was shown with the canonical answer; `abort` withdraws it (the
    fallback follows as an ordinary message). Each raises `TransportError` when delivery fails.
    """

    async def delta(self, text: str) -> None: ...

    async def close(self, final_text: str) -> None: ...

    async def abort(self, reason: str) -> None: ...


@runtime_checkable
class Channel(Protocol):
    """Each method raises `TransportError` (user-safe message) when delivery fails."""

    async def send_text(self, session: Session, text: str, hints: dict[str, str]) -> None: ...

    async def send_voice(self, session: Session, text: str) -> None: ...

    async def send_attachment(self, session: Session, attachment: Attachment) -> None: ...


@runtime_checkable
class StreamingChannel(Channel, Protocol):
    """A channel that can show an answer while the model writes it."""

    async def open_stream(self, session: Session, hints: dict[str, str]) -> MessageStream: ...
