"""The delivery ledger port: the record that a message's reply went out, kept once per message id."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class DeliveryLedger(Protocol):
    """Where a worker records, before sending, that it sends the reply to a message."""

    async def claim_delivery(self, message_id: str, attempt: int) -> bool:
        """True for the first run (`attempt`) of `message_id` that claims it, and again for
        that same run (a turn that claimed before streaming claims again before closing);
        False for any other run, because an earlier one sent the reply, or was cut off while
        sending it."""
        ...
