"""Real English that installs offline, and the embedders the benchmarks choose between.

`docstring_corpus`: the docstrings of the installed packages (every `.py` file under
site-packages and the standard library, read with `ast`, never imported), at least
`min_chars` long, whitespace-normalised, deduplicated, in a deterministic order; when
whole docstrings are fewer than asked, their paragraphs follow. `embedded_corpus` embeds
it once per embedder and keeps the matrix in a cache directory, so a rerun is fast.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import json
import os
import re
import site
import sysconfig
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from agentloop.adapters.embedders.hashing import HashingEmbedder
from agentloop.adapters.embedders.wordllama import WordLlamaEmbedder
from agentloop.ports import Embedder

Matrix = npt.NDArray[np.float32]
EMBEDDERS = ("default", "wordllama", "hashing")
CACHE = Path(os.environ.get("AGENTLOOP_BENCH_CACHE", Path(tempfile.gettempdir()) / "agentloop-bench-cache"))
_DEFINITIONS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
_SPACE = re.compile(r"\s+")
_PARAGRAPH = re.compile(r"\n\s*\n")


def source_roots() -> list[Path]:
    """Where the installed packages' sources are: site-packages, then the standard library."""
    roots = [*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"]]
    unique: dict[Path, None] = {}
    for root in roots:
        path = Path(root).resolve()
        if path.is_dir():
            unique[path] = None
    return list(unique)


def _sources(roots: Sequence[Path]) -> Iterator[Path]:
    """Every `.py` file under `roots` in a fixed order, each once (a root inside another is its own)."""
    others = set(roots)
    for root in roots:
        for folder, subfolders, files in os.walk(root):
            subfolders[:] = sorted(d for d in subfolders if d != "__pycache__" and Path(folder, d) not in others)
            yield from (Path(folder, name) for name in sorted(files) if name.endswith(".py"))


def _docstrings(path: Path) -> Iterator[str]:
    try:
        with warnings.catch_warnings():  # old escape sequences in third-party sources
            warnings.simplefilter("ignore")
            tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError, RecursionError):
        return
    for node in ast.walk(tree):
        if isinstance(node, _DEFINITIONS):
            text = ast.get_docstring(node, clean=True)
            if text:
                yield text


def docstring_corpus(count: int, *, min_chars: int = 80, roots: Sequence[Path] | None = None) -> list[str]:
    """Up to `count` distinct docstrings (then paragraphs of longer ones) of at least `min_chars`."""
    texts: dict[str, None] = {}
    paragraphs: dict[str, None] = {}
    for path in _sources(list(roots) if roots is not None else source_roots()):
        for docstring in _docstrings(path):
            text = _SPACE.sub(" ", docstring).strip()
            if len(text) >= min_chars:
                texts.setdefault(text, None)
            for part in _PARAGRAPH.split(docstring) if "\n\n" in docstring else ():
                paragraph = _SPACE.sub(" ", part).strip()
                if len(paragraph) >= min_chars:
                    paragraphs.setdefault(paragraph, None)
        if len(texts) >= count:
            return list(texts)[:count]
    return (list(texts) + [p for p in paragraphs if p not in texts])[:count]


def wordllama_embedder() -> Embedder:
    """agentloop's WordLlama adapter, which loads the weights from the wheel and never downloads."""
    return WordLlamaEmbedder()


def embedder_named(name: str) -> Embedder | None:
    """`--embedder`: None for "default" (what `open_stores` picks), else that embedder."""
    if name == "default":
        return None
    if name == "hashing":
        return HashingEmbedder()
    if name == "wordllama":
        return wordllama_embedder()
    raise ValueError(f"unknown embedder {name!r}; choose one of {', '.join(EMBEDDERS)}")


def _installed() -> str:
    """What decides the corpus: the installed distributions and their versions."""
    found = sorted(f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions() if d.metadata["Name"])
    return hashlib.sha256("\n".join(found).encode()).hexdigest()[:16]


def embedded_corpus(
    count: int, embedder: Embedder, *, min_chars: int = 80, cache: Path | None = None
) -> tuple[list[str], Matrix]:
    """The corpus of `count` texts and its vectors by `embedder`, from `cache` (default `CACHE`) when built before."""
    cache = cache or CACHE
    key = hashlib.sha256(f"{count}/{min_chars}/{embedder.name}/{_installed()}".encode()).hexdigest()[:16]
    texts_file, vectors_file = cache / f"corpus-{key}.json", cache / f"corpus-{key}.npy"
    if texts_file.exists() and vectors_file.exists():
        texts: list[str] = json.loads(texts_file.read_text())
        return texts, np.load(vectors_file)
    texts = docstring_corpus(count, min_chars=min_chars)
    vectors = np.concatenate([embedder.embed(texts[i : i + 2000]) for i in range(0, len(texts), 2000)] or [np.zeros((0, embedder.dim), np.float32)])
    cache.mkdir(parents=True, exist_ok=True)
    np.save(vectors_file, vectors.astype(np.float32))
    texts_file.write_text(json.dumps(texts))
    return texts, vectors.astype(np.float32)
