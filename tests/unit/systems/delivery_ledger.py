"""A delivery ledger in memory, as the inbox keeps one: the first run to claim a message id owns its reply."""

from __future__ import annotations


class Ledger:
    def __init__(self) -> None:
        self.claimed: dict[str, int] = {}

    async def claim_delivery(self, message_id: str, attempt: int) -> bool:
        return self.claimed.setdefault(message_id, attempt) == attempt
