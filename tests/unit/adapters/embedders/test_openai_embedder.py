"""OpenAIEmbedder against a real OpenAI-compatible server on a loopback port."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agentloop.adapters import open_stores
from agentloop.adapters.llm.http import RetryPolicy
from agentloop.adapters.embedders.openai import OpenAIEmbedder
from agentloop.errors import LlmCallError
from agentloop.ports import Embedder
from agentloop.scopes import Scope
from agentloop.testing.http import ScriptedServer

NO_WAIT = RetryPolicy(max_retries=1, backoff=0)


def embeddings(*vectors: list[float], reverse: bool = False) -> dict[str, Any]:
    """An embeddings response body; `reverse` lists the items last index first, as a server may."""
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
    return {"object": "list", "model": "served", "data": data[::-1] if reverse else data}


def test_texts_are_sent_in_batches_and_come_back_normalised_in_their_order() -> None:
    with ScriptedServer() as server:
        server.reply(body=embeddings([3, 0, 4], [0, 2, 0], reverse=True))
        server.reply(500, {"error": {"message": "overloaded"}})  # retried by the shared HTTP layer
        server.reply(body=embeddings([1, 0, 0], [0, 0, 5]))
        server.reply(body=embeddings([0, 1, 1]))
        embedder = OpenAIEmbedder(server.url, "mini", dim=3, api_key="k", batch_size=2, retry=NO_WAIT)
        vectors = embedder.embed(["a", "b", "c", "d", "e"])
    assert [r["body"] for r in server.requests] == [
        {"model": "mini", "input": ["a", "b"]}, {"model": "mini", "input": ["c", "d"]},
        {"model": "mini", "input": ["c", "d"]}, {"model": "mini", "input": ["e"]},
    ]
    assert [r["path"] for r in server.requests] == ["/v1/embeddings"] * 4 and server.requests[0]["auth"] == "Bearer k"
    assert vectors.dtype == np.float32 and vectors.shape == (5, 3)
    assert np.allclose(vectors[:2], [[0.6, 0, 0.8], [0, 1, 0]]), "in the texts' order, whatever the server's"
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert isinstance(embedder, Embedder) and embedder.name == "openai:mini/3"


def test_the_dimension_is_asked_of_the_server_once_when_not_given() -> None:
    with ScriptedServer() as server:
        server.reply(body=embeddings([1.0] * 7))
        embedder = OpenAIEmbedder(server.url, "mini")
        assert embedder.dim == 7 and embedder.name == "openai:mini/7"
        assert embedder.dim == 7 and len(server.requests) == 1


def test_an_unknown_dimension_asked_for_on_an_event_loop_says_to_give_dim() -> None:
    with ScriptedServer() as server:
        server.reply(body=embeddings([1.0] * 7))
        embedder = OpenAIEmbedder(server.url, "mini")

        async def name() -> str:
            return embedder.name  # what stores opened in async code (a server's start-up) read first

        with pytest.raises(RuntimeError, match="give dim=, or await aembed"):
            asyncio.run(name())
        asyncio.run(embedder.aembed(["a"]))
        assert asyncio.run(name()) == "openai:mini/7" and len(server.requests) == 1


def test_a_server_error_is_one_line_with_the_servers_explanation() -> None:
    page = b"<html><head><title>404 Not Found</title></head><body>" + b"<p>x</p>" * 500 + b"</body></html>"
    with ScriptedServer() as server:
        server.reply(404, raw=page, headers={"Content-Type": "text/html"})
        server.reply(body={"data": [{"index": 0, "embedding": "not numbers"}]})
        embedder = OpenAIEmbedder(server.url, "mini", dim=3)
        with pytest.raises(LlmCallError) as refused:
            embedder.embed(["a"])
        assert "HTTP 404" in str(refused.value) and "404 Not Found" in str(refused.value) and "<p>" not in str(refused.value)
        with pytest.raises(LlmCallError, match="no data"):
            embedder.embed(["a"])


def test_vectors_of_another_length_than_the_dim_given_are_refused() -> None:
    with ScriptedServer() as server:
        server.reply(body=embeddings([1.0, 0.0]))
        with pytest.raises(LlmCallError, match="vectors of length 2, not the dim 3"):
            OpenAIEmbedder(server.url, "mini", dim=3).embed(["a"])


def test_aembed_works_from_one_event_loop_after_another_and_embed_refuses_to_block_one() -> None:
    with ScriptedServer() as server:
        for _ in range(2):
            server.reply(body=embeddings([1.0, 0.0]))
        embedder = OpenAIEmbedder(server.url, "mini", dim=2)
        first = asyncio.run(embedder.aembed(["a"]))
        second = asyncio.run(embedder.aembed(["a"]))

        async def on_a_loop() -> None:
            embedder.embed(["a"])

        with pytest.raises(RuntimeError, match="await aembed"):
            asyncio.run(on_a_loop())
    assert np.array_equal(first, second)


def test_a_bots_rag_store_embeds_through_the_server_from_its_event_loop(tmp_path: Path) -> None:
    """The stores await the embedder, so an HTTP one works where turns run."""
    scope = Scope(project_id="p")
    with ScriptedServer() as server:
        server.reply(body=embeddings([1.0, 0.0, 0.0]))  # the stored text
        server.reply(body=embeddings([0.9, 0.1, 0.0]))  # the query
        with open_stores(tmp_path, embedder=OpenAIEmbedder(server.url, "mini", dim=3)) as stores:
            asyncio.run(stores.rag.add(scope, "The shop opens at nine"))
            hits = asyncio.run(stores.rag.search(scope, "opening hours", 1))
    assert [h.text for h in hits] == ["The shop opens at nine"] and hits[0].score == pytest.approx(0.9939, abs=1e-3)
    assert [r["body"]["input"] for r in server.requests] == [["The shop opens at nine"], ["opening hours"]]
