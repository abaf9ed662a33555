"""The Embedder and VectorIndex ports."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    @property
    def dim(self) -> int:
        """The length of every vector this embedder returns."""
        ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One L2-normalised float32 row per text, shape (len(texts), dim)."""
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
