"""The default Embedder: WordLlama's static token embeddings, read from the `wordllama` wheel.

The wheel holds the weights (`weights/l2_supercat_256.safetensors`) and the tokenizer
(`tokenizers/l2_supercat_tokenizer_config.json`), but `WordLlama.load` looks for the
tokenizer under `tokenizer/` and downloads it from Hugging Face when it is not there, and
importing `wordllama` configures the root logger. So this adapter never imports it: it
finds the package's folder and reads both files itself (safetensors and tokenizers), then
average-pools the token vectors as `WordLlamaInference.embed` does. Nothing is downloaded.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from agentloop.ports.vectors import Vectors

NAME_PREFIX = "wordllama-v1/"
"""The start of a WordLlamaEmbedder's name (v1: the l2_supercat weights); its dimension follows."""
DIMENSIONS = (64, 128, 256)
"""The lengths the bundled 256-d vectors can be cut to (they are trained so their first dims stand alone)."""
_WEIGHTS = Path("weights") / "l2_supercat_256.safetensors"
_TOKENIZER = Path("tokenizers") / "l2_supercat_tokenizer_config.json"
_INLINE_TEXTS = 8
"""Up to this many texts `aembed` embeds on the event loop: a handover to a thread costs more."""


def wordllama_name(dim: int) -> str:
    """The name of `WordLlamaEmbedder(dim)`, as stores record it."""
    return f"{NAME_PREFIX}{dim}"


@attrs.frozen
class _Model:
    """The tokenizer and the token table cut to one dimension."""

    tokenizer: Any
    table: npt.NDArray[np.float16]


_MODELS: dict[int, _Model] = {}
_REMEMBERED = 256
"""Single texts whose vectors are kept, oldest dropped first."""
_REMEMBERED_ROWS: dict[tuple[int, str], Vectors] = {}
_LOADING = threading.Lock()


def _model(dim: int) -> _Model:
    """The model of `dim`, read from the wheel on first use in this process."""
    model = _MODELS.get(dim)
    if model is None:
        with _LOADING:
            model = _MODELS.get(dim) or _load(dim)
            _MODELS[dim] = model
    return model


def _load(dim: int) -> _Model:
    spec = importlib.util.find_spec("wordllama")  # finds the folder without running the package's __init__
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "WordLlamaEmbedder needs the wordllama package, which is not installed; pip install agentloop-ecs "
            "(it depends on it), or give another embedder, e.g. HashingEmbedder()", name="wordllama",
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    try:
        table = load_file(str(folder / _WEIGHTS))["embedding.weight"]
        tokenizer = Tokenizer.from_file(str(folder / _TOKENIZER))
    except Exception as error:  # safetensors and tokenizers raise their own error types on a missing or bad file
        raise FileNotFoundError(
            f"the wordllama package at {folder} has no readable {_WEIGHTS} and {_TOKENIZER} ({error}); "
            "reinstall it: pip install --force-reinstall wordllama"
        ) from None
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return _Model(tokenizer, np.ascontiguousarray(table[:, :dim]))


class WordLlamaEmbedder:
    """Embed texts as the L2-normalised mean of their tokens' WordLlama vectors (no model to run).

    `dim` is 256 (the bundled vectors) or 128 or 64 (their first dimensions). The weights
    load once per process, on the first embedding, shared by every instance of a `dim`.
    A text with no tokens (the empty text) embeds to the zero row.
    """

    def __init__(self, dim: int = 256) -> None:
        if dim not in DIMENSIONS:
            raise ValueError(f"WordLlamaEmbedder needs dim in {DIMENSIONS}, got {dim}; use 256")
        self._dim = dim

    @property
    def name(self) -> str:
        """"wordllama-v1/<dim>"."""
        return wordllama_name(self._dim)

    @property
    def dim(self) -> int:
        return self._dim

    def load(self) -> None:
        """Read the weights now rather than on the first embedding."""
        _model(self._dim)

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One L2-normalised float32 row per text, shape (len(texts), dim). A single text is
        remembered (the last `_REMEMBERED` of them): a turn embeds its question for RAG and for
        notes alike."""
        if len(texts) == 1:
            return self._one(texts[0])
        return self._embed(texts)

    def _one(self, text: str) -> Vectors:
        remembered = _REMEMBERED_ROWS.get((self._dim, text))
        if remembered is None:
            remembered = self._embed((text,))
            remembered.flags.writeable = False
            if len(_REMEMBERED_ROWS) >= _REMEMBERED:
                del _REMEMBERED_ROWS[next(iter(_REMEMBERED_ROWS))]
            _REMEMBERED_ROWS[(self._dim, text)] = remembered
        return remembered.copy()  # the caller's to change

    def _embed(self, texts: Sequence[str]) -> Vectors:
        model = _model(self._dim)
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        if not texts:
            return out
        encodings = model.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        lengths = np.fromiter((len(encoding.ids) for encoding in encodings), dtype=np.intp, count=len(texts))
        ids = np.fromiter(itertools.chain.from_iterable(encoding.ids for encoding in encodings), dtype=np.intp, count=int(lengths.sum()))
        if ids.size == 0:
            return out
        np.minimum(ids, len(model.table) - 1, out=ids)
        filled = lengths > 0
        starts = np.cumsum(lengths) - lengths
        out[filled] = np.add.reduceat(model.table[ids], starts[filled], axis=0, dtype=np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        """`embed`: a few texts inline, more (or the first load) on a worker thread."""
        if len(texts) <= _INLINE_TEXTS and self._dim in _MODELS:
            return self.embed(texts)
        return await asyncio.to_thread(self.embed, texts)
