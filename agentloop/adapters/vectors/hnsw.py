"""The embedded VectorIndex: hnswlib (cosine) with its pitfalls handled.

The index is derived data: SQLite rows are the source of truth, and
`HnswVectorIndex.open_or_rebuild` rebuilds the file from them whenever it is missing,
unverified, unreadable, of another dimension or stale. hnswlib trusts the file it
loads (a damaged one can crash the process), so every save records the file's sha256
beside it (`<index>.sha256`) and a load checks it before hnswlib reads a byte.
"""

from __future__ import annotations

import hashlib
import os
import struct
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import hnswlib
import numpy as np
import numpy.typing as npt

from agentloop._log import get_logger
from agentloop.adapters.errors import IndexFileError
from agentloop.adapters._private_files import private_file, private_folder, write_private
from agentloop.ports.vectors import Vectors

if sys.platform != "win32":
    import fcntl

# The fixed header of an hnswlib index file (hnswalg.h saveIndex): offsetLevel0,
# max_elements, cur_element_count, size_data_per_element, label_offset, offsetData,
# maxlevel, enterpoint_node, maxM, maxM0, M, mult, ef_construction.
_HEADER = struct.Struct("<QQQQQQiIQQQdQ")
_DELETE_MARK = 0x01
_EXACT_CHUNK = 4096

# Chosen by benchmarks/vector_index.py's sweep (its figures are in docs/performance.md): the
# smallest ef whose recall on embedding-like data stays clear of the target, as latency grows with ef.
DEFAULT_M = 32
DEFAULT_EF_CONSTRUCTION = 200
DEFAULT_EF = 96

_logger = get_logger("agentloop.hnsw_index")


class _Hnsw(Protocol):
    """The part of `hnswlib.Index` this adapter uses (hnswlib ships no type stubs)."""

    ef: int

    def init_index(self, max_elements: int, M: int, ef_construction: int, random_seed: int) -> None: ...
    def load_index(self, path_to_index: str) -> None: ...
    def save_index(self, path_to_index: str) -> None: ...
    def set_ef(self, ef: int) -> None: ...
    def get_max_elements(self) -> int: ...
    def get_current_count(self) -> int: ...
    def resize_index(self, new_size: int) -> None: ...
    def add_items(self, data: Vectors, ids: npt.NDArray[np.int64], num_threads: int = -1) -> None: ...
    def mark_deleted(self, label: int) -> None: ...
    def get_items(self, ids: npt.NDArray[np.int64]) -> Vectors: ...
    def knn_query(
        self, data: Vectors, k: int, num_threads: int, filter: Callable[[int], bool] | None
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]: ...


def _new_hnsw(dim: int) -> _Hnsw:
    index: _Hnsw = hnswlib.Index(space="cosine", dim=dim)
    return index


class HnswVectorIndex:
    """Approximate cosine search over integer ids, safe to share between threads.

    The defaults (DEFAULT_M, DEFAULT_EF_CONSTRUCTION, DEFAULT_EF) meet recall@10 >= 0.95
    at p50 <= 2 ms for 100,000 embedding-like vectors of dim 384; the sweep behind them is in docs/performance.md.
    Removed ids stay in the graph (hnswlib `mark_deleted`) and still use capacity until
    the index is rebuilt; re-adding a removed or existing id replaces its vector.
    """

    def __init__(
        self,
        dim: int,
        *,
        capacity: int = 1024,
        m: int = DEFAULT_M,
        ef_construction: int = DEFAULT_EF_CONSTRUCTION,
        ef: int = DEFAULT_EF,
        path: str | os.PathLike[str] | None = None,
        seed: int = 100,
    ) -> None:
        if dim < 1 or capacity < 1:
            raise ValueError(f"HnswVectorIndex needs dim >= 1 and capacity >= 1, got {dim} and {capacity}")
        self._dim = dim
        self._path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._index = _new_hnsw(dim)
        self._index.init_index(max_elements=capacity, M=m, ef_construction=ef_construction, random_seed=seed)
        self._index.set_ef(ef)
        self._live: set[int] = set()
        # Removed ids keep their hnswlib slot; re-adding one reuses it.
        self._removed: set[int] = set()

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def ef(self) -> int:
        """The query-time breadth; hnswlib does not save it, so it is set after every load."""
        return int(self._index.ef)

    def set_ef(self, ef: int) -> None:
        """Trade query speed for recall; larger `ef` finds more of the true neighbours."""
        with self._lock:
            self._index.set_ef(ef)

    @property
    def capacity(self) -> int:
        """How many vectors (live or removed) fit before the next resize."""
        return int(self._index.get_max_elements())

    @property
    def path(self) -> Path | None:
        return self._path

    def __len__(self) -> int:
        """The number of live (not removed) vectors."""
        return len(self._live)

    def __contains__(self, id_: object) -> bool:
        return id_ in self._live

    def add(self, ids: Sequence[int], vectors: Vectors, *, threads: int = -1) -> None:
        """Insert or replace the vectors of `ids`, growing capacity geometrically, on
        `threads` threads (-1: one per core)."""
        labels = np.asarray(ids, dtype=np.int64).reshape(-1)
        if len(labels) == 0:
            return
        data = np.ascontiguousarray(np.atleast_2d(vectors), dtype=np.float32)
        if data.shape != (len(labels), self._dim):
            raise ValueError(
                f"add() needs one row of dim {self._dim} per id, got shape {data.shape} for {len(labels)} ids"
            )
        if len(np.unique(labels)) != len(labels):
            raise ValueError("add() got the same id twice in one call; pass each id once")
        if labels.min() < 0:
            raise ValueError("HnswVectorIndex ids must be non-negative integers")
        with self._lock:
            new = [label for label in labels.tolist() if label not in self._live]
            needed = self._index.get_current_count() + sum(1 for label in new if label not in self._removed)
            capacity = int(self._index.get_max_elements())
            if needed > capacity:
                grown = max(needed, capacity * 2)
                self._index.resize_index(grown)
                _logger.debug("hnsw_index_resized", capacity=grown, previous=capacity)
            self._index.add_items(data, labels, num_threads=threads)
            self._live.update(new)
            self._removed.difference_update(new)

    def remove(self, ids: Sequence[int]) -> None:
        """Forget `ids`; unknown or already removed ids are ignored."""
        with self._lock:
            for id_ in ids:
                if id_ in self._live:
                    self._index.mark_deleted(id_)
                    self._live.discard(id_)
                    self._removed.add(id_)

    def search(
        self, vector: Vectors, k: int, *, accept: Callable[[int], bool] | None = None
    ) -> list[tuple[int, float]]:
        """Up to `k` (id, cosine similarity) pairs, best first; `accept` filters ids.

        When hnswlib cannot fill `k` results under a selective filter, the answer comes
        from an exact search over the accepted ids, so it is always the best `k` of them.
        """
        query = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, -1)
        if query.shape[1] != self._dim:
            raise ValueError(f"query has dim {query.shape[1]}, but this index has dim {self._dim}")
        with self._lock:
            wanted = min(k, len(self._live))
            if wanted <= 0:
                return []
            try:
                labels, distances = self._index.knn_query(query, k=wanted, num_threads=1, filter=accept)
            except RuntimeError:
                # hnswlib found fewer than `wanted` accepted ids ("contiguous 2D array").
                return self._exact_search(query[0], k, accept)
        return [(int(label), 1.0 - float(distance)) for label, distance in zip(labels[0], distances[0])]

    def save(self, *, keep_larger: bool = False) -> None:
        """Write the index to its path atomically (a temporary file, then os.replace), and
        its checksum beside it; a crash between the two leaves a mismatch, so a rebuild.

        Saves and loads of one path by several processes take turns (a lock file beside
        it), so none reads one save's index with another's checksum. With `keep_larger`,
        a file holding more vectors is left in place: for an append-only source it was
        saved by a process that had seen more rows.
        """
        if self._path is None:
            raise ValueError("this HnswVectorIndex has no path; construct it with path=... to save it")
        private_folder(self._path.parent)
        temporary = _temporary(self._path)
        with _file_lock(self._path, exclusive=True), self._lock:
            count = self._index.get_current_count()
            if keep_larger and (saved := _saved_count(self._path)) is not None and saved > count:
                _logger.debug("hnsw_index_save_skipped", path=str(self._path), count=count, saved=saved)
                return
            try:
                private_file(temporary)  # hnswlib writes into it, keeping its mode
                self._index.save_index(str(temporary))
                digest = _sha256(temporary)
                os.replace(temporary, self._path)
            finally:
                temporary.unlink(missing_ok=True)
            _write_checksum(self._path, digest)
        _logger.debug("hnsw_index_saved", path=str(self._path), count=len(self._live))

    @classmethod
    def load(cls, path: str | os.PathLike[str], dim: int, *, ef: int = DEFAULT_EF) -> HnswVectorIndex:
        """Open a saved index; raises IndexFileError when it is not a sound index of `dim`
        or does not match the checksum its save recorded (checked before anything reads it)."""
        file = Path(path)
        loaded = _new_hnsw(dim)
        with _file_lock(file, exclusive=False):
            _verify(file)
            labels, deleted, stored_dim = _read_labels(file)
            if stored_dim != dim:
                raise IndexFileError(f"index file {file} holds vectors of dim {stored_dim}, not {dim}")
            try:
                loaded.load_index(str(file))
            except RuntimeError as error:
                raise IndexFileError(f"index file {file} is unreadable: {error}") from error
        loaded.set_ef(ef)
        index = cls(dim, capacity=1, ef=ef, path=file)
        index._index = loaded
        index._live = set(labels[~deleted].tolist())
        index._removed = set(labels[deleted].tolist())
        return index

    @classmethod
    def open_or_rebuild(
        cls,
        path: str | os.PathLike[str],
        dim: int,
        expected_count: int,
        load_rows: Callable[[], Iterable[tuple[int, Vectors]]],
        *,
        capacity: int = 1024,
        m: int = DEFAULT_M,
        ef_construction: int = DEFAULT_EF_CONSTRUCTION,
        ef: int = DEFAULT_EF,
        batch: int = 4096,
    ) -> HnswVectorIndex:
        """Load the index at `path`, or rebuild it from `load_rows()` and save it.

        It is rebuilt when the file is missing, does not match its recorded checksum (a
        damaged file, or one saved without it), is unreadable or truncated, of another
        dimension, or when its live count is not `expected_count` (the source of truth's).
        """
        log = _logger.bind(path=str(path), dim=dim, expected_count=expected_count)
        reason: str
        if not Path(path).exists():
            reason = "missing"
        else:
            try:
                loaded = cls.load(path, dim, ef=ef)
            except (IndexFileError, OSError) as error:
                reason = f"unreadable: {error}"
            else:
                if len(loaded) == expected_count:
                    log.info("hnsw_index_loaded", count=len(loaded))
                    return loaded
                reason = f"stale: the file holds {len(loaded)} vectors"
        log.info("hnsw_index_rebuilding", reason=reason)
        index = cls(
            dim,
            capacity=max(capacity, expected_count),
            m=m,
            ef_construction=ef_construction,
            ef=ef,
            path=path,
        )
        ids: list[int] = []
        vectors: list[Vectors] = []
        for id_, vector in load_rows():
            ids.append(id_)
            vectors.append(vector)
            if len(ids) >= batch:
                index.add(ids, np.stack(vectors))
                ids, vectors = [], []
        if ids:
            index.add(ids, np.stack(vectors))
        index.save()
        log.info("hnsw_index_rebuilt", count=len(index))
        return index

    def _exact_search(
        self, query: npt.NDArray[np.float32], k: int, accept: Callable[[int], bool] | None
    ) -> list[tuple[int, float]]:
        """The best `k` accepted live ids by exact cosine similarity (caller holds the lock)."""
        candidates = np.fromiter(
            (id_ for id_ in self._live if accept is None or accept(id_)), dtype=np.int64
        )
        if len(candidates) == 0:
            return []
        norm = float(np.linalg.norm(query))
        unit = query / norm if norm > 0 else query
        similarities = np.concatenate(
            [
                np.asarray(self._index.get_items(candidates[start : start + _EXACT_CHUNK]), dtype=np.float32) @ unit
                for start in range(0, len(candidates), _EXACT_CHUNK)
            ]
        )
        top = min(k, len(candidates))
        best = np.argpartition(-similarities, top - 1)[:top]
        best = best[np.argsort(-similarities[best], kind="stable")]
        return [(int(candidates[i]), float(similarities[i])) for i in best]


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")


@contextmanager
def _file_lock(path: Path, *, exclusive: bool) -> Iterator[None]:
    """Hold an advisory lock on `<index>.lock` (shared to read, exclusive to write); Windows
    has no `flock`, and there saves and loads by several processes do not take turns."""
    lock = path.with_name(path.name + ".lock")
    private_file(lock)
    with lock.open("a") as handle:
        if sys.platform != "win32":
            fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield


def _saved_count(path: Path) -> int | None:
    """How many vectors (live or removed) the file at `path` holds; None if it has no sound header."""
    try:
        with path.open("rb") as handle:
            header = handle.read(_HEADER.size)
    except OSError:
        return None
    return int(_HEADER.unpack(header)[2]) if len(header) == _HEADER.size else None


def _checksum_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _write_checksum(path: Path, digest: str) -> None:
    """Record `digest` in `sha256sum` format beside `path`, atomically."""
    target = _checksum_path(path)
    temporary = _temporary(target)
    try:
        write_private(temporary, f"{digest}  {path.name}\n")
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def _verify(file: Path) -> None:
    """Raise IndexFileError unless `file` hashes to the checksum its save recorded."""
    try:
        recorded = _checksum_path(file).read_text(encoding="ascii").split(maxsplit=1)[0]
    except (OSError, UnicodeDecodeError, IndexError):
        raise IndexFileError(f"index file {file} has no readable checksum beside it") from None
    if _sha256(file) != recorded:
        raise IndexFileError(f"index file {file} does not match its recorded checksum (damaged or replaced)")


def _read_labels(file: Path) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_], int]:
    """The labels, removed flags and dimension stored in an hnswlib index file.

    Reading the level-0 block directly is what tells removed ids apart after a load
    (hnswlib's Python API does not expose them) and catches a file of another dimension
    before hnswlib would misread it.
    """
    size = file.stat().st_size
    with file.open("rb") as handle:
        header = handle.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise IndexFileError(f"index file {file} is truncated: {size} bytes")
    offset_level0, _, count, per_element, label_offset, offset_data, *_ = _HEADER.unpack(header)
    data_bytes = label_offset - offset_data
    if data_bytes <= 0 or data_bytes % 4 or label_offset + 8 > per_element:
        raise IndexFileError(f"index file {file} has an unreadable header")
    if size < _HEADER.size + count * (per_element + 4):
        raise IndexFileError(f"index file {file} is truncated: {size} bytes for {count} elements")
    if count == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool), data_bytes // 4
    block = np.memmap(file, dtype=np.uint8, mode="r", offset=_HEADER.size, shape=(count, per_element))
    labels = np.ascontiguousarray(block[:, label_offset : label_offset + 8]).view("<u8").reshape(count)
    deleted = (block[:, offset_level0 + 2] & _DELETE_MARK).astype(bool)
    del block
    return labels.astype(np.int64), deleted, data_bytes // 4
