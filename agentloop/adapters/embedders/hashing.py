"""The embedded Embedder: signed feature hashing of words, word pairs and character n-grams.

It needs no model file and no network, and it is deterministic across processes (the
hash is CRC-32, never Python's salted `hash()`), so vectors stored by one process are
comparable with queries embedded by another. Texts that share words or word stems are
measurably similar; unrelated texts score near 0.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from agentloop.ports.vectors import Vectors

_WORD = re.compile(r"\w+")
_WORD_CACHE_SIZE = 16_384
_TEXT_CACHE_SIZE = 256
NAME_PREFIX = "hashing-v1/"
"""The start of a default HashingEmbedder's name; its dimension follows."""


def hashing_name(dim: int) -> str:
    """The name of `HashingEmbedder(dim)` with its default settings (what stores written
    before embedders had names were built with)."""
    return f"{NAME_PREFIX}{dim}"


class HashingEmbedder:
    """Embed texts by hashing lower-cased word unigrams, bigrams and character n-grams.

    Each feature lands in one of `dim` buckets with a sign taken from another bit of its
    hash, so collisions cancel on average instead of adding up. Rows are L2-normalised;
    a text with no word characters (the empty text included) embeds to the zero row,
    whose cosine similarity with everything is 0.
    """

    def __init__(
        self,
        dim: int = 384,
        *,
        char_ngram: int = 3,
        word_weight: float = 1.0,
        bigram_weight: float = 0.7,
        char_weight: float = 0.4,
        seed: int = 0,
    ) -> None:
        if dim < 2:
            raise ValueError(f"HashingEmbedder needs dim >= 2, got {dim}; use e.g. 384")
        if char_ngram < 1:
            raise ValueError(f"HashingEmbedder needs char_ngram >= 1, got {char_ngram}; use e.g. 3")
        self._dim = dim
        settings = (char_ngram, word_weight, bigram_weight, char_weight, seed)
        self._name = hashing_name(dim)
        if settings != (3, 1.0, 0.7, 0.4, 0):  # other settings make other vectors
            self._name += ";n={};w={};b={};c={};seed={}".format(*settings)
        self._char_ngram = char_ngram
        self._word_weight = word_weight
        self._bigram_weight = bigram_weight
        self._char_weight = char_weight
        self._seed = seed & 0xFFFFFFFF
        # Bounded per-instance caches: a word's and a word pair's buckets never change, and
        # one turn embeds its message more than once (RAG search, note retrieval).
        self._word_features = lru_cache(maxsize=_WORD_CACHE_SIZE)(self._word_cells)
        self._pair_features = lru_cache(maxsize=_WORD_CACHE_SIZE)(self._pair_cell)
        self._text_rows = lru_cache(maxsize=_TEXT_CACHE_SIZE)(self._embed_one)

    @property
    def name(self) -> str:
        """"hashing-v1/<dim>", followed by the settings when they are not the defaults."""
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        """`embed`, inline: a text takes microseconds, less than a handover to a thread."""
        return self.embed(texts)

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One L2-normalised float32 row per text, shape (len(texts), dim)."""
        if len(texts) == 1:
            return self._text_rows(texts[0]).copy()
        return self._embed_many(texts)

    def _embed_one(self, text: str) -> Vectors:
        return self._row(text).astype(np.float32).reshape(1, -1)

    def _embed_many(self, texts: Sequence[str]) -> Vectors:
        out = np.empty((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row] = self._row(text)
        return out

    def _row(self, text: str) -> npt.NDArray[np.float64]:
        """One text's L2-normalised row, summed in float64 (its features' buckets added up)."""
        cells: list[int] = []
        weights: list[float] = []
        words = _WORD.findall(text.lower())
        for word in words:
            word_cells, word_weights = self._word_features(word)
            cells += word_cells
            weights += word_weights
        for pair in zip(words, words[1:]):
            cell, weight = self._pair_features(pair)
            cells.append(cell)
            weights.append(weight)
        row = np.asarray(np.bincount(np.asarray(cells, dtype=np.intp), weights, self._dim), dtype=np.float64)
        squared = float(row @ row)
        if squared > 0:
            row /= math.sqrt(squared)
        return row

    def _hash(self, feature: str) -> int:
        return zlib.crc32(feature.encode("utf-8"), self._seed)

    def _signed(self, h: int, weight: float) -> tuple[int, float]:
        """The low bits of a hash pick the bucket, the top bit the sign."""
        return (h & 0x7FFFFFFF) % self._dim, -weight if h & 0x80000000 else weight

    def _word_cells(self, word: str) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """The buckets and signed weights of one word's unigram, then of its character n-grams."""
        marked = f"<{word}>"
        n = self._char_ngram
        features = [self._signed(self._hash(f"w\x00{word}"), self._word_weight)]
        features += (
            self._signed(self._hash(f"c\x00{marked[i:i + n]}"), self._char_weight) for i in range(max(1, len(marked) - n + 1))
        )
        cells, weights = zip(*features)
        return cells, weights

    def _pair_cell(self, pair: tuple[str, str]) -> tuple[int, float]:
        """The bucket and signed weight of a word bigram."""
        return self._signed(self._hash(f"b\x00{pair[0]}\x00{pair[1]}"), self._bigram_weight)
