"""HnswVectorIndex: hnswlib's pitfalls handled, filters exact, the file derived from SQLite."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from agentloop.adapters.vectors.hnsw import HnswVectorIndex
from agentloop.adapters.errors import IndexFileError
from agentloop.ports.vectors import VectorIndex

DIM = 8


def _vectors(count: int, seed: int = 0, dim: int = DIM) -> npt.NDArray[np.float32]:
    return np.random.default_rng(seed).standard_normal((count, dim)).astype(np.float32)


def _exact(
    vectors: dict[int, npt.NDArray[np.float32]], query: npt.NDArray[np.float32], k: int
) -> list[tuple[int, float]]:
    """The best `k` ids by exact cosine similarity, as numpy computes it."""
    ids = sorted(vectors)
    if not ids or k <= 0:
        return []
    matrix = np.stack([vectors[i] for i in ids]).astype(np.float64)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    similarities = matrix @ (query / np.linalg.norm(query))
    order = np.argsort(-similarities, kind="stable")[:k]
    return [(ids[i], float(similarities[i])) for i in order]


def _assert_same_matches(got: list[tuple[int, float]], expected: list[tuple[int, float]]) -> None:
    assert len(got) == len(expected)
    assert [s for _, s in got] == pytest.approx([s for _, s in expected], abs=1e-4)
    # Ids must agree wherever the similarity is not tied with a neighbour's.
    sims = [s for _, s in expected]
    for position, ((got_id, _), (want_id, want_sim)) in enumerate(zip(got, expected)):
        tied = any(abs(want_sim - other) < 1e-4 for j, other in enumerate(sims) if j != position)
        if not tied:
            assert got_id == want_id


def test_it_satisfies_the_vector_index_port() -> None:
    index = HnswVectorIndex(DIM)
    assert isinstance(index, VectorIndex)
    assert index.dim == DIM


def test_an_empty_index_returns_nothing() -> None:
    assert HnswVectorIndex(DIM).search(_vectors(1)[0], 5) == []


def test_k_is_clamped_to_the_live_count_and_results_are_best_first() -> None:
    index = HnswVectorIndex(DIM)
    vectors = _vectors(6)
    index.add(list(range(6)), vectors)
    index.remove([5])
    found = index.search(vectors[2], 50)
    assert len(found) == 5
    assert found[0] == (2, pytest.approx(1.0, abs=1e-5))
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
    assert index.search(vectors[2], 0) == []


def test_adding_past_capacity_grows_it_geometrically() -> None:
    index = HnswVectorIndex(DIM, capacity=2)
    vectors = _vectors(40)
    capacities = []
    for i in range(40):
        index.add([i], vectors[i : i + 1])
        capacities.append(index.capacity)
    assert len(index) == 40
    assert sorted(set(capacities)) == [2, 4, 8, 16, 32, 64]
    assert index.search(vectors[39], 1)[0][0] == 39


def test_a_removed_id_is_never_returned_and_unknown_ids_are_ignored() -> None:
    index = HnswVectorIndex(DIM)
    vectors = _vectors(10)
    index.add(list(range(10)), vectors)
    index.remove([3, 3, 999])
    assert len(index) == 9
    assert 3 not in index
    assert all(id_ != 3 for id_, _ in index.search(vectors[3], 10))


def test_re_adding_a_removed_or_existing_id_replaces_its_vector_in_place() -> None:
    index = HnswVectorIndex(DIM, capacity=10)
    vectors = _vectors(12)
    index.add(list(range(10)), vectors[:10])
    index.remove([4])
    index.add([4, 7], vectors[10:12])
    assert len(index) == 10
    assert index.capacity == 10
    assert index.search(vectors[10], 1)[0] == (4, pytest.approx(1.0, abs=1e-5))
    assert index.search(vectors[11], 1)[0] == (7, pytest.approx(1.0, abs=1e-5))
    assert index.search(vectors[7], 1)[0][1] < 0.999


def test_bad_input_is_refused_with_a_clear_message() -> None:
    index = HnswVectorIndex(DIM)
    with pytest.raises(ValueError, match="one row of dim 8 per id"):
        index.add([1], _vectors(1, dim=4))
    with pytest.raises(ValueError, match="same id twice"):
        index.add([1, 1], _vectors(2))
    with pytest.raises(ValueError, match="non-negative"):
        index.add([-1], _vectors(1))
    with pytest.raises(ValueError, match="query has dim 4"):
        index.search(_vectors(1, dim=4)[0], 1)
    with pytest.raises(ValueError, match="no path"):
        index.save()


@settings(deadline=None, max_examples=80)
@given(
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    count=st.integers(min_value=1, max_value=60),
    k=st.integers(min_value=1, max_value=25),
    keep=st.floats(min_value=0.0, max_value=1.0),
    removed=st.floats(min_value=0.0, max_value=0.5),
    capacity=st.integers(min_value=1, max_value=64),
)
def test_filtered_search_returns_the_exact_best_accepted_ids(
    seed: int, count: int, k: int, keep: float, removed: float, capacity: int
) -> None:
    """I11 at the index level: a search never returns an id its filter rejects or a
    removed id, and returns the true best min(k, accepted) of the accepted live ids."""
    rng = np.random.default_rng(seed)
    vectors = _vectors(count, seed)
    index = HnswVectorIndex(DIM, capacity=capacity)
    index.add(list(range(count)), vectors)
    gone = {i for i in range(count) if rng.random() < removed}
    index.remove(sorted(gone))
    accepted = {i for i in range(count) if rng.random() < keep}
    query = rng.standard_normal(DIM).astype(np.float32)

    found = index.search(query, k, accept=accepted.__contains__)

    live_accepted = {i: vectors[i] for i in accepted - gone}
    assert {i for i, _ in found} <= set(live_accepted)
    _assert_same_matches(found, _exact(live_accepted, query, k))


def test_a_filter_that_rejects_the_nearest_neighbours_still_fills_k() -> None:
    index = HnswVectorIndex(DIM, ef=10)
    vectors = _vectors(500, seed=3)
    index.add(list(range(500)), vectors)
    accepted = set(range(0, 500, 97))
    found = index.search(vectors[1], 10, accept=accepted.__contains__)
    _assert_same_matches(found, _exact({i: vectors[i] for i in accepted}, vectors[1], 10))


def test_save_and_load_give_identical_results_and_keep_removals(tmp_path: Path) -> None:
    path = tmp_path / "notes.hnsw"
    vectors = _vectors(200, seed=5)
    index = HnswVectorIndex(DIM, path=path)
    index.add(list(range(200)), vectors)
    index.remove([0, 17, 150])
    index.save()

    loaded = HnswVectorIndex.load(path, DIM)
    assert len(loaded) == 197
    assert 17 not in loaded and 18 in loaded
    for query in _vectors(20, seed=6):
        assert loaded.search(query, 10) == index.search(query, 10)
    assert sorted(tmp_path.iterdir()) == [path, tmp_path / "notes.hnsw.lock", tmp_path / "notes.hnsw.sha256"]


def test_ef_is_set_again_after_a_load(tmp_path: Path) -> None:
    path = tmp_path / "notes.hnsw"
    index = HnswVectorIndex(DIM, ef=77, path=path)
    index.add([1, 2], _vectors(2))
    index.save()
    assert HnswVectorIndex.load(path, DIM, ef=77).ef == 77
    assert HnswVectorIndex.load(path, DIM, ef=250).ef == 250


def _record_checksum(path: Path) -> None:
    """What `save` records beside an index: its sha256, in `sha256sum` format."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    (path.parent / f"{path.name}.sha256").write_text(f"{digest}  {path.name}\n")


def test_a_damaged_or_unrecorded_file_is_refused_before_hnswlib_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "notes.hnsw"
    index = HnswVectorIndex(DIM, path=path)
    index.add(list(range(20)), _vectors(20))
    index.save()
    sound = bytearray(path.read_bytes())
    sound[-1] ^= 0x01
    path.write_bytes(sound)
    with pytest.raises(IndexFileError, match="does not match its recorded checksum.*open_or_rebuild"):
        HnswVectorIndex.load(path, DIM)
    (tmp_path / "notes.hnsw.sha256").unlink()
    with pytest.raises(IndexFileError, match="no readable checksum"):
        HnswVectorIndex.load(path, DIM)


def test_loading_an_unsound_file_raises_an_actionable_error(tmp_path: Path) -> None:
    """Even a file whose checksum matches is read only if its header is sound."""
    path = tmp_path / "notes.hnsw"
    index = HnswVectorIndex(DIM, path=path)
    index.add(list(range(20)), _vectors(20))
    index.save()
    with pytest.raises(IndexFileError, match="dim 8, not 16.*open_or_rebuild"):
        HnswVectorIndex.load(path, DIM * 2)
    sound = path.read_bytes()
    for damaged, message in [(sound + bytes(16), "unreadable"), (sound[:-1], "truncated|unreadable"), (b"short", "truncated")]:
        path.write_bytes(damaged)
        _record_checksum(path)
        with pytest.raises(IndexFileError, match=message):
            HnswVectorIndex.load(path, DIM)


def _sqlite_rows(path: Path, vectors: npt.NDArray[np.float32]) -> sqlite3.Connection:
    """A real source of truth: one row per note with its embedding as a blob."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, embedding BLOB NOT NULL)")
    db.executemany(
        "INSERT INTO notes VALUES (?, ?)", [(i * 3, row.tobytes()) for i, row in enumerate(vectors)]
    )
    db.commit()
    return db


class _Source:
    """Reads (id, vector) rows from SQLite and counts how often it was asked."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.reads = 0

    def count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM notes").fetchone()[0])

    def rows(self) -> Iterator[tuple[int, npt.NDArray[np.float32]]]:
        self.reads += 1
        for id_, blob in self.db.execute("SELECT id, embedding FROM notes ORDER BY id"):
            yield id_, np.frombuffer(blob, dtype=np.float32)


@pytest.fixture
def source(tmp_path: Path) -> Iterator[_Source]:
    db = _sqlite_rows(tmp_path / "bot.sqlite3", _vectors(30, seed=9))
    yield _Source(db)
    db.close()


def _open(path: Path, source: _Source) -> tuple[HnswVectorIndex, list[dict[str, object]]]:
    with capture_logs() as logs:
        index = HnswVectorIndex.open_or_rebuild(path, DIM, source.count(), source.rows, batch=7)
    return index, logs


def test_a_missing_file_is_rebuilt_from_the_rows_and_saved(tmp_path: Path, source: _Source) -> None:
    path = tmp_path / "idx" / "notes.hnsw"
    index, logs = _open(path, source)
    assert path.exists()
    assert len(index) == 30 and 87 in index
    assert any(e["event"] == "hnsw_index_rebuilding" and e["reason"] == "missing" for e in logs)
    reopened, logs = _open(path, source)
    assert source.reads == 1
    assert any(e["event"] == "hnsw_index_loaded" for e in logs)
    query = _vectors(1, seed=1)[0]
    assert reopened.search(query, 5) == index.search(query, 5)


def test_a_truncated_file_is_rebuilt(tmp_path: Path, source: _Source) -> None:
    path = tmp_path / "notes.hnsw"
    _open(path, source)
    path.write_bytes(path.read_bytes()[:-50])
    index, logs = _open(path, source)
    assert len(index) == 30 and source.reads == 2
    assert any(str(e.get("reason", "")).startswith("unreadable") for e in logs)
    assert len(HnswVectorIndex.load(path, DIM)) == 30


def test_a_garbage_file_is_rebuilt(tmp_path: Path, source: _Source) -> None:
    path = tmp_path / "notes.hnsw"
    path.write_bytes(b"not an index")
    index, logs = _open(path, source)
    assert len(index) == 30
    assert any(str(e.get("reason", "")).startswith("unreadable") for e in logs)


def test_a_stale_file_is_rebuilt(tmp_path: Path, source: _Source) -> None:
    path = tmp_path / "notes.hnsw"
    _open(path, source)
    source.db.execute("DELETE FROM notes WHERE id = 0")
    source.db.commit()
    index, logs = _open(path, source)
    assert len(index) == 29 and 0 not in index
    assert any(str(e.get("reason", "")).startswith("stale") for e in logs)


def test_a_file_of_another_dimension_is_rebuilt(tmp_path: Path, source: _Source) -> None:
    path = tmp_path / "notes.hnsw"
    other = HnswVectorIndex(DIM * 2, path=path)
    other.add(list(range(30)), _vectors(30, dim=DIM * 2))
    other.save()
    index, logs = _open(path, source)
    assert index.dim == DIM and len(index) == 30
    assert any("dim 16" in str(e.get("reason", "")) for e in logs)


def test_concurrent_adds_removes_and_searches_do_not_fail() -> None:
    index = HnswVectorIndex(DIM, capacity=4)
    errors: list[BaseException] = []
    vectors = _vectors(400, seed=11)

    def writer(offset: int) -> None:
        try:
            for i in range(offset, 400, 4):
                index.add([i], vectors[i : i + 1])
                if i % 8 == 0:
                    index.remove([i])
        except BaseException as error:  # collected and asserted below
            errors.append(error)

    def reader() -> None:
        try:
            for i in range(300):
                found = index.search(vectors[i % 400], 5, accept=lambda id_: id_ % 2 == 1)
                assert all(id_ % 2 == 1 for id_, _ in found)
        except BaseException as error:  # collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(o,)) for o in range(4)]
    threads += [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(index) == 350
    assert index.search(vectors[3], 1)[0][0] == 3


DAMAGE_SCRIPT = """
import random, sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from structlog.testing import capture_logs

import agentloop.adapters.vectors.scoped
from agentloop.adapters import SqliteKnowledgeRepository
from agentloop.notes import KnowledgeItem, Layer, LayerIds, NoteStatus, NoteType

agentloop.adapters.vectors.scoped.EXACT_LIMIT = 10  # so a store of 60 notes opens its graph file

directory, tries = Path(sys.argv[1]), int(sys.argv[2])
rng, owner, dim = random.Random(int(sys.argv[3])), LayerIds("default", project_id="p"), 16
vectors = np.random.default_rng(7).standard_normal((60, dim)).astype(np.float32)
with capture_logs():
    repository = SqliteKnowledgeRepository(directory / "k.db", dim=dim)
    repository.add_many([
        KnowledgeItem(NoteType.PATTERN, Layer.PROJECT, owner, f"n{i}", "text", v, datetime(2026, 1, 1, tzinfo=UTC))
        for i, v in enumerate(vectors)
    ])
    repository.close()
index, checksum = directory / "k.db.hnsw", directory / "k.db.hnsw.sha256"


def damage(data: bytearray) -> bytearray:
    mode = rng.choice(["flip", "header", "truncate", "extend", "zero"])
    if mode == "flip":
        for _ in range(rng.randint(1, 16)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif mode == "header":
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(min(96, len(data)))] = rng.randrange(256)
    elif mode == "truncate":
        del data[rng.randrange(len(data)):]
    elif mode == "extend":
        data += rng.randbytes(rng.randint(1, 4096))
    else:
        start = rng.randrange(len(data))
        data[start:start + rng.randint(1, 512)] = bytes(min(len(data) - start, 512))
    return data


rebuilds = 0
for attempt in range(tries):
    before = index.read_bytes()
    after = bytes(damage(bytearray(before)))
    index.write_bytes(after)
    if rng.random() < 0.2 and checksum.exists():
        checksum.write_bytes(damage(bytearray(checksum.read_bytes())))
    with capture_logs() as logs:
        repository = SqliteKnowledgeRepository(directory / "k.db", dim=dim)
        rebuilt = any(e["event"] == "hnsw_index_rebuilding" for e in logs)
        assert rebuilt or after == before, f"try {attempt}: a damaged file was loaded"
        rebuilds += rebuilt
        assert len(repository) == len(vectors)
        for i in rng.sample(range(len(vectors)), 5):
            ((item, similarity),) = repository.search(
                vectors[i], 1, caller=owner, layer=Layer.PROJECT, statuses={NoteStatus.DRAFT}
            )
            assert item.title == f"n{i}" and similarity > 0.999, (attempt, i, item.title, similarity)
        repository.close()
print(f"ok {tries} tries, {rebuilds} rebuilt")
"""


def test_a_store_opens_rebuilds_and_searches_correctly_whatever_damage_its_index_file_has(tmp_path: Path) -> None:
    """Flipped bits, a garbled header, a truncated, extended or zeroed file, sometimes a
    damaged checksum too: the store always rebuilds and answers right. In a subprocess,
    so a crash inside hnswlib fails the test instead of ending pytest."""
    root = str(Path(__file__).resolve().parents[4])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", DAMAGE_SCRIPT, str(tmp_path), "120", "2026"], capture_output=True, text=True,
        timeout=120, env=env,
    )
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.startswith("ok 120 tries"), done.stdout


def test_a_save_that_keeps_the_larger_file_leaves_one_with_more_vectors_in_place(tmp_path: Path) -> None:
    path = tmp_path / "notes.hnsw"
    vectors = _vectors(30)
    larger, smaller = HnswVectorIndex(DIM, path=path), HnswVectorIndex(DIM, path=path)
    larger.add(list(range(30)), vectors)
    smaller.add(list(range(20)), vectors[:20])
    larger.save()
    smaller.save(keep_larger=True)
    assert len(HnswVectorIndex.load(path, DIM)) == 30
    smaller.save()
    assert len(HnswVectorIndex.load(path, DIM)) == 20
