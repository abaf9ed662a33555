"""The LLM port."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from agentloop.messages import LlmReply, LlmRequest


@runtime_checkable
class LLM(Protocol):
    async def complete(self, request: LlmRequest) -> LlmReply:
        """Answer `request`; raise `LlmCallError` with a `FailureKind` when it cannot."""
        ...
