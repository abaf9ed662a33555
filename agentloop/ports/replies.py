"""The reply-store port: the outcomes a server running turns itself has sent, kept by message id,
so a client that sends the same message id again gets the stored outcome instead of a second turn."""

from __future__ import annotations

from typing import Any, Protocol

import attrs


@attrs.frozen
class Reply:
    """A message's stored outcome, with what it answered: its session and the digest of the message."""

    session_id: str
    digest: str
    outcome: dict[str, Any]


class Replies(Protocol):
    """Where a server keeps the outcomes it sent, one namespace of message ids per `scope`; both calls are coroutines."""

    async def find(self, scope: str, message_id: str) -> Reply | None: ...

    async def keep(self, scope: str, message_id: str, reply: Reply) -> None:
        """Store `reply` unless one is stored under the id already (the first one stays)."""
        ...
