"""The Embedder and VectorIndex ports."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors whose cosine similarity follows their meaning.

    Vectors of two embedders are not comparable, so a store records the `name` of the
    embedder that built it and refuses another. `aembed` is what code on an event loop
    awaits: it must not hold the loop up for longer than a short computation (an HTTP
    embedder awaits its server, a local model runs on a worker thread).
    """

    @property
    def name(self) -> str:
        """Which embedder and model made the vectors, with their dimension, e.g. "hashing-v1/384"."""
        ...

    @property
    def dim(self) -> int:
        """The length of every vector this embedder returns."""
        ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One L2-normalised float32 row per text, shape (len(texts), dim)."""
        ...

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        """`embed`, awaited without holding up the event loop."""
        ...


@runtime_checkable
class VectorIndex(Protocol):
    """Approximate cosine search over integer ids."""

    @property
    def dim(self) -> int: ...

    def __len__(self) -> int:
        """The number of live (not removed) vectors."""
        ...

    def add(self, ids: Sequence[int], vectors: Vectors) -> None:
        """Insert or replace the vectors of `ids`."""
        ...

    def remove(self, ids: Sequence[int]) -> None:
        """Forget `ids`; unknown ids are ignored."""
        ...

    def search(
        self, vector: Vectors, k: int, *, accept: Callable[[int], bool] | None = None
    ) -> list[tuple[int, float]]:
        """Up to `k` (id, cosine similarity) pairs, best first; `accept` filters ids."""
        ...
