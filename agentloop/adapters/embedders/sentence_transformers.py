"""An Embedder on a local sentence-transformers model: a model directory, or a model already
in the user's Hugging Face cache; nothing is downloaded. Needs the `embeddings-local` extra."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentloop.ports.vectors import Vectors


class SentenceTransformerEmbedder:
    """Embeds texts with the sentence-transformers model at `model` (a directory, or the name
    of a model in the user's model cache), `batch_size` texts at a time, rows L2-normalised.

    The model runs on `device` (default: the CPU) and, for code on an event loop, on a
    worker thread (`aembed`), so a turn's event loop is never held up by it.
    """

    def __init__(self, model: str | os.PathLike[str], *, batch_size: int = 32, device: str = "cpu") -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        try:
            from sentence_transformers import SentenceTransformer
        except ModuleNotFoundError as missing:
            raise ModuleNotFoundError(
                f"SentenceTransformerEmbedder needs {missing.name}, which is not installed; "
                "pip install 'agentloop-ecs[embeddings-local]'"
            ) from None
        where = os.fspath(model)
        try:
            self._model: Any = SentenceTransformer(where, device=device, local_files_only=True)
        except (OSError, ValueError) as error:  # a directory holding no model is a ValueError of transformers
            said = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise FileNotFoundError(
                f"no sentence-transformers model at {where!r}, neither a model directory nor a model in the model cache "
                f"({said}); give the directory the model was saved to, or download it once where a network is allowed"
            ) from None
        dimension = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        found = dimension()  # the method's name before sentence-transformers 5 is the second one
        if not isinstance(found, int):
            raise ValueError(f"the model at {where!r} does not say the length of its vectors; give a sentence-embedding model")
        self._dim = found
        self._name = f"st:{Path(where).name}/{self._dim}"
        self.batch_size = batch_size

    @property
    def name(self) -> str:
        """"st:<model directory or name>/<dim>"."""
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One L2-normalised float32 row per text, shape (len(texts), dim)."""
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        vectors = self._model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        """`embed` on a worker thread: a model takes milliseconds per batch, too long for an event loop."""
        return await asyncio.to_thread(self.embed, texts)
