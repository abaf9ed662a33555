"""Vector search planned by how many rows the caller may see.

Every row belongs to one key (a tenant chain and status, a RAG scope). Each key's vectors
are kept contiguous in memory, so a caller who sees few rows gets an exact numpy search over
just those rows, and its cost follows its own rows, not the store's. A caller who sees many
rows searches the hnswlib graph without a per-node Python filter, with room for the rows
it may not see, and falls back to the exact search over its rows when that comes up short.

The graph only serves callers who see more than `exact_limit` rows, so it is built once the
index holds that many: below it, no row pays for a graph insert. A new row is searchable
(exactly) as soon as `add` returns; a worker thread inserts it into the graph afterwards
without the GIL (hnswlib releases it), on one core unless a bulk import left a backlog, so
a write never waits for the graph. Until the graph holds a row, searches that use the
graph score it exactly.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from agentloop._log import get_logger
from agentloop.adapters.vectors.hnsw import HnswVectorIndex
from agentloop.ports.vectors import Vectors

Key = TypeVar("Key", bound=Hashable)

# Up to this many visible rows an exact search is both exact and faster than the graph: numpy
# scores them in about the time the graph takes to answer with recall 0.99 (and on random data
# it never does); benchmarks/retrieval.py measures it.
EXACT_LIMIT = 20_000
# The graph is asked for this many times the share of hits the caller may not see, so the
# filtered answer still holds k rows; when it does not, the exact search answers.
_HEADROOM = 1.5
# Rows waiting for the graph that a graph search also scores one by one; with more waiting
# (a bulk import in progress) the search is exact over the caller's rows instead.
_PENDING_SCORED = 2048
# Rows the worker inserts into the graph per call, and how long it waits for more work.
_GRAPH_BATCH = 4096
_IDLE_SECONDS = 1.0
# The worker's nice value: under contention it gives way to the writers and searches (a bulk
# import's graph took both cores of two and halved the writer's rate), and idle cores it still uses.
_GRAPH_NICE = 10

_logger = get_logger("agentloop.scoped_index")


def open_graph(
    path: Path, dim: int, count: int, load_rows: Callable[[], Iterable[tuple[int, Vectors]]], **settings: int
) -> HnswVectorIndex:
    """The graph of a store of `count` rows: loaded or rebuilt (`HnswVectorIndex.open_or_rebuild`)
    when a search may use it, above `EXACT_LIMIT` rows; else empty, built if the store grows past it."""
    if count <= EXACT_LIMIT:
        return HnswVectorIndex(dim, path=path, **settings)
    return HnswVectorIndex.open_or_rebuild(path, dim, count, load_rows, **settings)


class _Rows:
    """One key's unit vectors and ids, contiguous and grown geometrically."""

    def __init__(self, dim: int) -> None:
        self.ids: npt.NDArray[np.int64] = np.empty(16, dtype=np.int64)
        self.vectors: Vectors = np.empty((16, dim), dtype=np.float32)
        self.size = 0

    def append(self, ids: npt.NDArray[np.int64], vectors: Vectors) -> int:
        """Append the rows; the position of the first."""
        start, end = self.size, self.size + len(ids)
        if end > len(self.ids):
            grown = max(end, 2 * len(self.ids))
            self.ids = np.resize(self.ids, grown)
            vectors_grown = np.empty((grown, self.vectors.shape[1]), dtype=np.float32)
            vectors_grown[:start] = self.vectors[:start]
            self.vectors = vectors_grown
        self.ids[start:end] = ids
        self.vectors[start:end] = vectors
        self.size = end
        return start

    def pop(self, position: int) -> tuple[Vectors, int | None]:
        """Remove the row at `position` (the last row takes its place); its vector and the id moved, if any."""
        vector = self.vectors[position].copy()
        last = self.size - 1
        moved: int | None = None
        if position != last:
            self.ids[position] = self.ids[last]
            self.vectors[position] = self.vectors[last]
            moved = int(self.ids[position])
        self.size = last
        return vector, moved


def unit_rows(vectors: Vectors) -> Vectors:
    """`vectors` scaled to length 1 (zero rows stay zero), as cosine search compares them.
    One row or many, a row comes out the same to the last bit (a reopened index equals the live one)."""
    data = np.ascontiguousarray(np.atleast_2d(vectors), dtype=np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", data, data))
    if len(data) == 1:  # a query or a turn's text: half the masked divide's cost
        one: Vectors = data / norms[0] if norms[0] > 0 else np.zeros_like(data)
        return one
    unit: Vectors = np.divide(data, norms[:, None], out=np.zeros_like(data), where=norms[:, None] > 0)
    return unit


class ScopedVectorIndex(Generic[Key]):
    """An HnswVectorIndex over all rows, plus each key's rows kept together for exact search.

    Rows are added, moved to another key (a status change) or removed (an erase). Safe to share between threads.
    """

    def __init__(self, graph: HnswVectorIndex, *, exact_limit: int | None = None) -> None:
        self.graph = graph
        self.exact_limit = EXACT_LIMIT if exact_limit is None else exact_limit
        self._lock = threading.Lock()
        self._rows: dict[Key, _Rows] = {}
        self._where: dict[int, tuple[Key, int]] = {}
        # Rows the graph does not hold yet, oldest first, and the worker that inserts them.
        self._pending: list[tuple[list[int], Vectors]] = []
        self._pending_rows = 0
        self._graph_turn = threading.Condition()
        self._worker: threading.Thread | None = None
        # Whether the graph is kept: from the row that takes the index past `exact_limit` on
        # (or a graph loaded with rows); before that every search is exact.
        self._graph_kept = len(graph) > 0

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, id_: object) -> bool:
        return id_ in self._where

    def key_of(self, id_: int) -> Key | None:
        where = self._where.get(id_)
        return None if where is None else where[0]

    def size(self, key: Key) -> int:
        rows = self._rows.get(key)
        return 0 if rows is None else rows.size

    def add(self, keys: Sequence[Key], ids: Sequence[int], vectors: Vectors) -> None:
        """Take in new rows, the row of `ids[i]` under `keys[i]`, one batch insert into the
        graph for those it lacks; ids already held are left as they are (a catch-up got there first)."""
        labels = np.asarray(ids, dtype=np.int64).reshape(-1)
        if len(labels) == 0:
            return
        data = np.ascontiguousarray(np.atleast_2d(vectors), dtype=np.float32)
        if len(keys) != len(labels) or data.shape != (len(labels), self.graph.dim):
            raise ValueError(f"add() needs one key and one row of dim {self.graph.dim} per id")
        ids_list = labels.tolist()
        unit = unit_rows(data)
        with self._lock:
            positions: dict[Key, list[int]] = {}
            for position, key in enumerate(keys):
                if ids_list[position] not in self._where:
                    positions.setdefault(key, []).append(position)
            for key, of_key in positions.items():
                rows = self._rows.get(key)
                if rows is None:
                    rows = self._rows[key] = _Rows(self.graph.dim)
                start = rows.append(labels[of_key], unit[of_key])
                for offset, position in enumerate(of_key):
                    self._where[ids_list[position]] = (key, start + offset)
            if self._graph_kept:  # only rows filed just now can be missing: earlier ones are in it or waiting
                batch = self._missing_from_graph(ids_list, data, sorted(p for of_key in positions.values() for p in of_key))
            elif len(self._where) > self.exact_limit:  # the graph's first fill
                self._graph_kept = True
                every_id, every_vector = self._all_rows()
                batch = self._missing_from_graph(every_id, every_vector, range(len(every_id)))
            else:
                return
        if not batch[0]:
            return
        with self._graph_turn:
            self._pending.append(batch)
            self._pending_rows += len(batch[0])
            if self._worker is None:
                self._worker = threading.Thread(target=self._insert_pending, name="agentloop-graph", daemon=True)
                self._worker.start()
            self._graph_turn.notify_all()

    def _missing_from_graph(self, ids: list[int], data: Vectors, candidates: Iterable[int]) -> tuple[list[int], Vectors]:
        """The rows at positions `candidates` of `ids`/`data` that the graph lacks."""
        fresh = [p for p in candidates if ids[p] not in self.graph]
        return (ids, data) if len(fresh) == len(ids) else ([ids[p] for p in fresh], data[fresh])

    def _all_rows(self) -> tuple[list[int], Vectors]:
        """Every row's id and unit vector (caller holds the lock)."""
        held = [(rows.ids[: rows.size], rows.vectors[: rows.size]) for rows in self._rows.values() if rows.size]
        return np.concatenate([ids for ids, _ in held]).tolist(), np.concatenate([vectors for _, vectors in held])

    def _insert_pending(self) -> None:
        """The worker: insert waiting rows into the graph a batch at a time; it stops after
        `_IDLE_SECONDS` with nothing to do (the next add starts another)."""
        _give_way()
        while True:
            with self._graph_turn:
                if not self._pending:
                    self._graph_turn.wait(_IDLE_SECONDS)
                    if not self._pending:
                        self._worker = None
                        return
                taken, size = 0, 0
                while taken < len(self._pending) and size < _GRAPH_BATCH:
                    size += len(self._pending[taken][0])
                    taken += 1
                batches = self._pending[:taken]
            ids = [id_ for batch_ids, _ in batches for id_ in batch_ids]
            try:
                # A trickle of adds takes one core; a bulk import's backlog takes them all.
                threads = 1 if self._pending_rows < _GRAPH_BATCH else -1
                self.graph.add(ids, np.concatenate([vectors for _, vectors in batches]), threads=threads)
            except Exception:  # the rows stay searchable exactly; the saved file will be rebuilt
                _logger.exception("scoped_index.graph_insert_failed", rows=len(ids))
            with self._graph_turn:
                del self._pending[:taken]
                self._pending_rows -= size
                self._graph_turn.notify_all()

    def wait_for_graph(self) -> None:
        """Return once the graph holds every row added so far (before saving it)."""
        with self._graph_turn:
            while self._pending:
                self._graph_turn.wait()

    def save(self, *, keep_larger: bool = False) -> None:
        """Save the graph (`HnswVectorIndex.save`) once it holds every row added so far."""
        self.wait_for_graph()
        self.graph.save(keep_larger=keep_larger)

    def move(self, id_: int, key: Key) -> None:
        """File the row `id_` under `key` (its vector unchanged); an unknown id is ignored."""
        with self._lock:
            where = self._where.get(id_)
            if where is None or where[0] == key:
                return
            old_key, position = where
            vector, moved = self._rows[old_key].pop(position)
            if moved is not None:
                self._where[moved] = (old_key, position)
            rows = self._rows.get(key)
            if rows is None:
                rows = self._rows[key] = _Rows(self.graph.dim)
            self._where[id_] = (key, rows.append(np.array([id_], dtype=np.int64), vector.reshape(1, -1)))

    def remove(self, ids: Sequence[int]) -> None:
        """Forget the rows of `ids` (an erase deleted them); unknown ids are ignored."""
        self.wait_for_graph()
        with self._lock:
            for id_ in ids:
                where = self._where.pop(id_, None)
                if where is None:
                    continue
                key, position = where
                _, moved = self._rows[key].pop(position)
                if moved is not None:
                    self._where[moved] = (key, position)
        self.graph.remove(ids)

    def search(self, vector: Vectors, k: int, keys: Collection[Key]) -> list[tuple[int, float]]:
        """Up to `k` (id, cosine similarity) pairs among the rows of `keys`, best first.

        Few visible rows: exact. Many: the graph with headroom for the rows filtered out
        after it (all rows visible: no filter at all), then exact if it came up short.
        """
        visible = sum(self.size(key) for key in keys)
        if k <= 0 or visible == 0:
            return []
        if visible > self.exact_limit and self._pending_rows <= _PENDING_SCORED:
            with self._graph_turn:
                pending = list(self._pending)
            hits = self._graph_search(vector, min(k, visible), visible, keys)
            if hits is not None:
                return _best(hits + self._score_pending(vector, pending, keys), k)
        return self._exact(vector, k, keys)

    def _graph_search(self, vector: Vectors, wanted: int, visible: int, keys: Collection[Key]) -> list[tuple[int, float]] | None:
        """The graph's best `wanted` rows of `keys` (no filter when every row is visible),
        or None when the rows filtered out left fewer."""
        total = len(self._where)
        if visible == total:
            return self.graph.search(vector, wanted)
        fetch = min(total, math.ceil(wanted * total / visible * _HEADROOM) + 10)
        keyed = self._where
        hits = [(i, s) for i, s in self.graph.search(vector, fetch) if (keyed.get(i) or (None,))[0] in keys]
        return hits[:wanted] if len(hits) >= wanted else None

    def _score_pending(
        self, vector: Vectors, pending: list[tuple[list[int], Vectors]], keys: Collection[Key]
    ) -> list[tuple[int, float]]:
        """Exact scores of the rows of `keys` the graph does not hold yet (at most a few thousand)."""
        if not pending:
            return []
        query = unit_rows(vector)[0]
        keyed = self._where
        scored = []
        for ids, vectors in pending:
            mine = [position for position, id_ in enumerate(ids) if (keyed.get(id_) or (None,))[0] in keys]
            if mine:
                similarities = _dot(unit_rows(vectors[mine]), query)
                scored += [(ids[p], float(s)) for p, s in zip(mine, similarities.tolist(), strict=True)]
        return scored

    def _exact(self, vector: Vectors, k: int, keys: Collection[Key]) -> list[tuple[int, float]]:
        """The best `k` rows of `keys` by exact cosine similarity."""
        query = unit_rows(vector)[0]
        if query.shape[0] != self.graph.dim:
            raise ValueError(f"query has dim {query.shape[0]}, but this index has dim {self.graph.dim}")
        scored_ids: list[npt.NDArray[np.int64]] = []
        scores: list[npt.NDArray[np.float32]] = []
        with self._lock:  # a move may reorder a key's rows; the products release the GIL
            for key in keys:
                rows = self._rows.get(key)
                if rows is not None and rows.size:
                    scored_ids.append(rows.ids[: rows.size].copy())
                    scores.append(_dot(rows.vectors[: rows.size], query))
        if not scores:
            return []
        ids = scored_ids[0] if len(scored_ids) == 1 else np.concatenate(scored_ids)
        similarities = scores[0] if len(scores) == 1 else np.concatenate(scores)
        top = min(k, len(ids))
        best = np.argpartition(-similarities, top - 1)[:top] if top < len(ids) else np.arange(len(ids))
        best = best[np.argsort(-similarities[best], kind="stable")]
        return [(int(ids[i]), float(similarities[i])) for i in best.tolist()]


def _give_way() -> None:
    """Lower this thread's priority to `_GRAPH_NICE`: on Linux the nice value is each thread's
    own and the threads hnswlib starts inherit it; elsewhere a thread id is no process id,
    and nothing changes."""
    if not sys.platform.startswith("linux"):
        return
    try:
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, max(_GRAPH_NICE, os.getpriority(os.PRIO_PROCESS, thread)))
    except (AttributeError, OSError):  # no per-thread priority here, or not allowed
        pass


def _best(hits: list[tuple[int, float]], k: int) -> list[tuple[int, float]]:
    """The `k` best (id, similarity) pairs, best first, each id once."""
    best: dict[int, float] = {}
    for id_, similarity in hits:
        best[id_] = max(similarity, best.get(id_, similarity))
    return sorted(best.items(), key=lambda hit: -hit[1])[:k]


def _dot(rows: Vectors, query: Vectors) -> Vectors:
    """`rows @ query` on this thread only: BLAS's matrix-vector product would split it over
    threads that, on a busy machine, take milliseconds to wake. `np.vecdot` takes one
    BLAS dot product per row, never threaded at this length, and is faster than `einsum`'s loop."""
    products: Vectors = np.vecdot(rows, query)
    return products
