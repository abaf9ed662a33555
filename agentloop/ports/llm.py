"""The LLM port: a model answers a request whole (`complete`) and may stream it (`stream`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from agentloop.messages import LlmReply, LlmRequest, StreamEvent


@runtime_checkable
class LLM(Protocol):
    async def complete(self, request: LlmRequest) -> LlmReply:
        """Answer `request`; raise `LlmCallError` with a `FailureKind` when it cannot."""
        ...


@runtime_checkable
class StreamingLLM(LLM, Protocol):
    """A model that can also stream its answer as it writes it.

    `stream` yields `TextDelta`, `ToolCallDelta` and `Usage` events, then exactly one
    `Finished` with the whole reply (what `complete` would have answered). An error before
    the first event or mid-stream is an `LlmCallError`; `agentloop.streaming.events_of`
    gives any `LLM` this shape.
    """

    def stream(self, request: LlmRequest) -> AsyncIterator[StreamEvent]: ...


@runtime_checkable
class CheckableLLM(LLM, Protocol):
    """A model on a server that can be checked once, before a conversation, at no token cost."""

    def check(self, *, timeout: float = 5.0) -> None:
        """Raise an `AgentloopError` saying what to fix when the server will not answer this
        model (out of reach, the API key refused, a wrong base URL, an unknown model name)."""
        ...
