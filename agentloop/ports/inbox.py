"""The delivery ledger port: the record that a message's reply went out, kept once per message id."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class DeliveryLedger(Protocol):
    """Where a worker records, before sending, that it sends the reply to a message."""

    async def claim_delivery(self, message_id: str) -> bool:
        """True the first time for `message_id` (send the reply); False ever after, because
        an earlier run of the turn sent it, or was cut off while sending it."""
        ...
