"""ScopedVectorIndex: a search planned by the caller's visible rows, exact when they are few,
the graph without a per-node filter when they are many, and new rows searchable at once."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop.adapters import HashingEmbedder, SqliteRagStore
from agentloop.adapters.vectors.hnsw import HnswVectorIndex
from agentloop.adapters.vectors.scoped import _GRAPH_NICE, ScopedVectorIndex, _give_way, unit_rows
from agentloop.ports.vectors import Vectors
from agentloop.scopes import Scope

DIM = 16


def _unit(count: int, seed: int = 0) -> Vectors:
    rows = np.random.default_rng(seed).standard_normal((count, DIM)).astype(np.float32)
    unit: Vectors = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return unit


def _exact(vectors: Vectors, ids: list[int], query: Vectors, k: int) -> list[int]:
    similarities = vectors @ query
    return [ids[i] for i in np.argsort(-similarities, kind="stable")[:k]]


@settings(deadline=None, max_examples=30)
@given(
    keys=st.lists(st.sampled_from("abcd"), min_size=1, max_size=60),
    wanted=st.sets(st.sampled_from("abcd"), min_size=1),
    k=st.integers(1, 8),
    exact_limit=st.sampled_from([0, 10, 1000]),
    seed=st.integers(0, 1000),
)
def test_a_search_returns_only_rows_of_the_callers_keys(
    keys: list[str], wanted: set[str], k: int, exact_limit: int, seed: int
) -> None:
    """I11: whichever way a search is planned (exact or through the graph), every hit belongs
    to one of the caller's keys, and when it is exact it is the best `k` of them."""
    vectors = _unit(len(keys) + 1, seed)
    index: ScopedVectorIndex[str] = ScopedVectorIndex(HnswVectorIndex(DIM, ef=200), exact_limit=exact_limit)
    index.add(keys, list(range(len(keys))), vectors[:-1])
    index.wait_for_graph()
    found = index.search(vectors[-1], k, wanted)
    mine = [i for i, key in enumerate(keys) if key in wanted]
    assert {i for i, _ in found} <= set(mine)
    if len(mine) <= exact_limit:
        assert [i for i, _ in found] == _exact(vectors[mine], mine, vectors[-1], k)


def test_few_visible_rows_are_searched_exactly_even_where_the_graph_is_poor() -> None:
    """A graph with one neighbour per node and ef 1 misses most true neighbours; a scope
    of 200 rows among 2,000 is answered exactly all the same."""
    vectors = _unit(2001, seed=3)
    keys = ["mine" if i % 10 == 0 else "other" for i in range(2000)]
    index: ScopedVectorIndex[str] = ScopedVectorIndex(HnswVectorIndex(DIM, m=2, ef_construction=4, ef=1))
    index.add(keys, list(range(2000)), vectors[:-1])
    mine = list(range(0, 2000, 10))
    assert [i for i, _ in index.search(vectors[-1], 10, {"mine"})] == _exact(vectors[mine], mine, vectors[-1], 10)


def test_a_row_is_found_as_soon_as_it_is_added_whatever_the_plan() -> None:
    vectors = _unit(301, seed=5)
    index: ScopedVectorIndex[str] = ScopedVectorIndex(HnswVectorIndex(DIM), exact_limit=100)
    index.add(["k"] * 300, list(range(300)), vectors[:300])
    index.wait_for_graph()
    index.add(["k"], [300], vectors[300:])
    assert index.search(vectors[300], 1, {"k"})[0][0] == 300  # 301 visible rows: the graph's plan
    index.wait_for_graph()
    assert len(index.graph) == 301


def test_a_moved_row_is_found_under_its_new_key_only() -> None:
    vectors = _unit(50, seed=7)
    index: ScopedVectorIndex[str] = ScopedVectorIndex(HnswVectorIndex(DIM))
    index.add(["draft"] * 50, list(range(50)), vectors)
    index.move(7, "published")
    assert [i for i, _ in index.search(vectors[7], 1, {"published"})] == [7]
    assert 7 not in {i for i, _ in index.search(vectors[7], 50, {"draft"})}
    assert index.size("draft") == 49


def test_a_rag_search_in_a_small_scope_never_walks_the_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its cost follows the scope's own rows, not the bot's: the other scopes are not visited."""
    store = SqliteRagStore.open(tmp_path / "bot.sqlite3", HashingEmbedder(dim=64), tmp_path / "bot.rag.hnsw")
    for i in range(300):
        store.add(Scope(user_id=f"u{i % 30}"), f"text {i} about topic {i % 7}")

    def refuse(*args: object, **kwargs: object) -> list[tuple[int, float]]:
        raise AssertionError("the graph was searched for a scope of 10 rows")

    monkeypatch.setattr(HnswVectorIndex, "search", refuse)
    hits = store.search(Scope(user_id="u3"), "text 3 about topic 3", 3)
    assert hits[0].text == "text 3 about topic 3"
    assert all(hit.scope == Scope(user_id="u3") for hit in hits)
    store.close()


def test_an_index_saved_after_a_bulk_add_holds_every_row(tmp_path: Path) -> None:
    """Saving waits for the graph to take in the rows still waiting for it, so the next
    open loads the file instead of rebuilding it."""
    path = tmp_path / "rows.hnsw"
    index: ScopedVectorIndex[str] = ScopedVectorIndex(HnswVectorIndex(DIM, path=path), exact_limit=100)
    index.add(["k"] * 500, list(range(500)), _unit(500))
    index.save()
    assert len(HnswVectorIndex.load(path, DIM)) == 500


def test_the_graph_is_built_only_once_the_rows_outgrow_the_exact_search() -> None:
    """Below `exact_limit` rows every search is exact, so no row pays for a graph insert; the
    row that takes the index past it brings every row into the graph, which then answers."""
    vectors = _unit(201, seed=11)
    index: ScopedVectorIndex[str] = ScopedVectorIndex(HnswVectorIndex(DIM, ef=200), exact_limit=150)
    for i in range(150):
        index.add(["a" if i % 2 else "b"], [i], vectors[i : i + 1])
    index.wait_for_graph()
    assert len(index.graph) == 0
    assert index.search(vectors[3], 1, {"a"})[0][0] == 3
    index.add(["a"] * 50, list(range(150, 200)), vectors[150:200])
    index.wait_for_graph()
    assert len(index.graph) == 200
    index.add(["b"], [200], vectors[200:])
    index.wait_for_graph()
    assert len(index.graph) == 201
    assert {i for i, _ in index.search(vectors[120], 5, {"a", "b"})} == set(_exact(vectors, list(range(201)), vectors[120], 5))


def test_a_small_store_opens_without_building_a_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that every search answers exactly neither loads nor rebuilds a graph when it opens."""
    embedder = HashingEmbedder(dim=64)
    store = SqliteRagStore.open(tmp_path / "bot.sqlite3", embedder, tmp_path / "bot.rag.hnsw")
    for i in range(50):
        store.add(Scope(user_id="u"), f"text {i}")
    store.close()

    def refuse(*args: object, **kwargs: object) -> HnswVectorIndex:
        raise AssertionError("a graph was loaded or rebuilt for 50 rows")

    monkeypatch.setattr(HnswVectorIndex, "open_or_rebuild", refuse)
    store = SqliteRagStore.open(tmp_path / "bot.sqlite3", embedder, tmp_path / "bot.rag.hnsw")
    assert store.search(Scope(user_id="u"), "text 7", 1)[0].text == "text 7"
    store.close()


def test_a_row_scaled_alone_equals_the_same_row_scaled_in_a_batch() -> None:
    """A store scales a new row on its own and, reopened, all its rows at once: the two must
    agree to the last bit, or a search's scores change across a reopen."""
    rows = np.random.default_rng(9).standard_normal((500, 384)).astype(np.float32) * 7
    batch = unit_rows(rows)
    assert all(np.array_equal(unit_rows(rows[i]), batch[i : i + 1]) for i in range(len(rows)))
    assert not unit_rows(np.zeros(384, dtype=np.float32)).any()


def test_the_graph_worker_gives_way_to_the_writer_and_only_its_own_thread_does() -> None:
    """On Linux, where each thread has its own nice value, a bulk import's graph inserts run at
    a lower priority (nice 10) than the thread that writes; elsewhere nothing changes."""
    linux = sys.platform.startswith("linux")
    seen: list[int] = []
    process = os.getpriority(os.PRIO_PROCESS, 0)
    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) if linux else process

    def worker() -> None:
        _give_way()
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) if linux else os.getpriority(os.PRIO_PROCESS, 0))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [max(before, _GRAPH_NICE) if linux else process]
    assert os.getpriority(os.PRIO_PROCESS, 0) == process
