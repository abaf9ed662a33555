"""The HTTP model adapters are built the same way: one constructor shape, one retry policy."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from typing import Any

import pytest

from agentloop import ChatMessage, LlmCallError, LlmRequest
from agentloop.adapters.llm.anthropic import AnthropicLLM
from agentloop.adapters.llm.http import RetryPolicy
from agentloop.adapters.llm.openai import OpenAICompatibleLLM
from agentloop.testing.http import ScriptedServer

SHARED = ["base_url", "model", "api_key", "timeout", "retry", "sleep", "client", "context_window"]
OWN = {OpenAICompatibleLLM: ["max_retries", "backoff", "max_backoff", "send_cache_key"], AnthropicLLM: ["max_tokens", "caching"]}
"""What each adapter takes after the shared keywords: OpenAI's deprecated retry keywords and whether it sends
`prompt_cache_key`, Anthropic's token limit and where its prompt cache breakpoints go."""


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as scripted:
        yield scripted


def test_both_constructors_take_the_shared_parameters_first_in_one_order_with_one_default_each() -> None:
    openai, anthropic = (inspect.signature(adapter).parameters for adapter in (OpenAICompatibleLLM, AnthropicLLM))
    for adapter, parameters in ((OpenAICompatibleLLM, openai), (AnthropicLLM, anthropic)):
        assert list(parameters) == SHARED + OWN[adapter]
    for name in SHARED:
        assert (openai[name].kind, openai[name].default, openai[name].annotation) == (
            anthropic[name].kind, anthropic[name].default, anthropic[name].annotation
        ), name
    assert openai["retry"].default == RetryPolicy()


@pytest.mark.parametrize("adapter", [OpenAICompatibleLLM, AnthropicLLM])
def test_both_constructors_accept_the_same_keywords_and_retry_by_the_same_policy(
    server: ScriptedServer, adapter: type[OpenAICompatibleLLM] | type[AnthropicLLM]
) -> None:
    for _ in range(3):
        server.reply(503, {"error": {"message": "busy"}})
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    keywords: dict[str, Any] = {"api_key": "k", "timeout": 5.0, "retry": RetryPolicy(max_retries=2, backoff=0.25), "sleep": sleep}
    llm = adapter(server.url, "m", **keywords)
    with pytest.raises(LlmCallError, match="HTTP 503"):
        asyncio.run(llm.complete(LlmRequest((ChatMessage.user("hi"),))))
    assert delays == [0.25, 0.5] and len(server.requests) == 3


@pytest.mark.parametrize("adapter", [OpenAICompatibleLLM, AnthropicLLM])
@pytest.mark.parametrize("window", [0, -1])
def test_a_context_window_below_one_token_is_refused_by_the_constructor(adapter: Any, window: int) -> None:
    """`context_window=` is None (read from the listing) or at least one token: a zero window never reaches the budget."""
    with pytest.raises(ValueError, match=rf"^context_window must be at least 1 token, or None to read it from the model listing; got {window}$"):
        adapter("http://127.0.0.1:1/v1", "m", context_window=window)
    assert adapter("http://127.0.0.1:1/v1", "m", context_window=1).context_window == 1
    assert adapter("http://127.0.0.1:1/v1", "m").context_window is None
