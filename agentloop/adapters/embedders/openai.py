"""An Embedder for any OpenAI-compatible `POST /embeddings` endpoint (OpenAI, Ollama, vLLM,
LiteLLM, llama.cpp server). Needs the `openai` extra (httpx, tenacity)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentloop.adapters.llm.http import ModelHttpClient, RetryPolicy, json_body
from agentloop.errors import LlmCallError
from agentloop.outcome import FailureKind
from agentloop.ports.vectors import Vectors


class OpenAIEmbedder:
    """Embeds texts with `model` on the server at `base_url`, `batch_size` texts per request.

    `dim` is the length of the model's vectors: give it, or it is asked of the server once
    (one request) when first needed. Rows come back L2-normalised, in the order of the
    texts whatever order the server lists them in. Requests go through the shared HTTP
    layer: retries of 408, 409, 429, 5xx, timeouts and lost connections, the server's explanation
    in one line (`LlmCallError`), a client per call so any event loop can await `aembed`.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        dim: int | None = None,
        api_key: str | None = None,
        batch_size: int = 64,
        timeout: float = 60.0,
        retry: RetryPolicy = RetryPolicy(),
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if dim is not None and dim < 1:
            raise ValueError(f"dim must be positive, got {dim}; leave it out to ask the server")
        self.model = model
        self.batch_size = batch_size
        self._dim = dim
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = ModelHttpClient(base_url, headers=headers, timeout=timeout, retry=retry)

    @property
    def dim(self) -> int:
        """The vectors' length: as given, else asked of the server once (and not from an event loop)."""
        if self._dim is None:
            if _in_event_loop():
                raise RuntimeError(
                    f"OpenAIEmbedder({self.model!r}) does not know the length of its vectors yet, and asking the server "
                    "from this thread's event loop would hold it up; give dim=, or await aembed() once before"
                )
            self._dim = int(self.embed(["dimension"]).shape[1])
        return self._dim

    @property
    def name(self) -> str:
        """"openai:<model>/<dim>"."""
        return f"openai:{self.model}/{self.dim}"

    def embed(self, texts: Sequence[str]) -> Vectors:
        """`aembed` for code that runs no event loop (scripts, a worker thread)."""
        if not _in_event_loop():
            return asyncio.run(self.aembed(texts))
        raise RuntimeError(
            "OpenAIEmbedder.embed was called on a thread that runs an event loop, which it would hold up; "
            "await aembed() there instead"
        )

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        """One L2-normalised float32 row per text, a request per `batch_size` texts."""
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        batches = [await self._batch(texts[start : start + self.batch_size]) for start in range(0, len(texts), self.batch_size)]
        vectors = np.concatenate(batches)
        if self._dim is None:
            self._dim = vectors.shape[1]
        elif vectors.shape[1] != self._dim:
            raise LlmCallError(
                f"the model {self.model!r} returned vectors of length {vectors.shape[1]}, not the dim {self._dim} "
                "this embedder was given; give the model's dim", kind=FailureKind.VALIDATION,
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        np.divide(vectors, norms, out=vectors, where=norms > 0)
        return vectors

    async def _batch(self, texts: Sequence[str]) -> Vectors:
        async with self.http.post("/embeddings", {"model": self.model, "input": list(texts)}) as response:
            body = await json_body(response)
        return _vectors(body, len(texts), self.model)


def _in_event_loop() -> bool:
    """Whether this thread runs an event loop, which a blocking request would hold up."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _vectors(body: Any, count: int, model: str) -> Vectors:
    """The `data[i].embedding` rows of an embeddings response, in `index` order."""
    try:
        rows = sorted(body["data"], key=lambda item: item.get("index", 0))
        vectors = np.array([row["embedding"] for row in rows], dtype=np.float32)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise LlmCallError(
            f"the embeddings response for {model!r} has no data[].embedding lists of numbers ({exc!r})",
            kind=FailureKind.VALIDATION,
        ) from exc
    if vectors.ndim != 2 or len(vectors) != count:
        raise LlmCallError(
            f"the embeddings response for {model!r} holds {len(vectors)} vector(s) for {count} text(s)",
            kind=FailureKind.VALIDATION,
        )
    return vectors
