"""SqliteKnowledgeRepository: the derived index file, the row re-check and closing (the port's
contract is checked by the conformance suite, tests/unit/adapters/test_store_conformance.py)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from agentloop.adapters import SqliteKnowledgeRepository
from agentloop.notes import RETRIEVABLE, KnowledgeItem, Layer, LayerIds, NoteMetadata, NoteType

AT = datetime(2026, 1, 1, tzinfo=UTC)
OWNER = LayerIds("acme", "o1", "t1", "p1")


def _vector(seed: int, dim: int = 8) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


def _item(seed: int, layer: Layer = Layer.PROJECT, owner: LayerIds = OWNER) -> KnowledgeItem:
    metadata = NoteMetadata("hash", AT, "m-1", "s1", "u1", owner.project_id, ("a", "b"))
    return KnowledgeItem(NoteType.PATTERN, layer, owner.truncated(layer), f"note {seed}", f"# note {seed}\n", _vector(seed), AT, metadata)


def test_the_index_is_saved_on_close_and_reused_on_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "k.db"
    repository = SqliteKnowledgeRepository(path, dim=8)
    stored = [repository.add(_item(seed)) for seed in range(5)]
    repository.close()
    assert (tmp_path / "k.db.hnsw").exists()
    monkeypatch.setattr(SqliteKnowledgeRepository, "_vectors", lambda self: pytest.fail("the index was rebuilt"))
    reopened = SqliteKnowledgeRepository(path, dim=8)
    (hit, similarity), *_ = reopened.search(_vector(3), 1, caller=OWNER, layer=Layer.PROJECT, statuses=RETRIEVABLE)
    assert hit.key == stored[3].key and similarity == pytest.approx(1.0, abs=1e-5)
    reopened.close()


def test_a_missing_index_is_rebuilt_from_the_rows(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    repository = SqliteKnowledgeRepository(path, dim=8)
    stored = [repository.add(_item(seed)) for seed in range(4)]
    repository.close()
    (tmp_path / "k.db.hnsw").unlink()
    rebuilt = SqliteKnowledgeRepository(path, dim=8)
    hits = rebuilt.search(_vector(2), 4, caller=OWNER, layer=Layer.PROJECT, statuses=RETRIEVABLE, min_similarity=-1.0)
    assert hits[0][0].key == stored[2].key and len(hits) == 4
    rebuilt.close()


def test_a_row_moved_to_another_tenant_behind_the_index_is_not_returned(tmp_path: Path) -> None:
    """I11 holds even when the in-memory filter is stale: every returned row is re-checked."""
    path = tmp_path / "k.db"
    repository = SqliteKnowledgeRepository(path, dim=8)
    note = repository.add(_item(1))
    other = sqlite3.connect(path)
    other.execute("UPDATE knowledge_items SET project_id = 'p-other' WHERE id = ?", (note.key,))
    other.commit()
    other.close()
    assert repository.search(_vector(1), 3, caller=OWNER, layer=Layer.PROJECT, statuses=RETRIEVABLE) == []
    repository.close()


def test_the_connection_is_closed_even_when_saving_the_index_fails(tmp_path: Path) -> None:
    index = tmp_path / "k.hnsw"
    repository = SqliteKnowledgeRepository(tmp_path / "k.db", dim=8, index_path=index)
    index.unlink(missing_ok=True)
    index.mkdir()  # the index can no longer be written there
    with pytest.raises(OSError):
        repository.close()
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        repository.items()


def test_batches_added_by_two_processes_in_turn_get_distinct_ids_and_find_each_others_notes(tmp_path: Path) -> None:
    """A batch is numbered from the last id AUTOINCREMENT gave, whichever process gave it."""
    path = tmp_path / "k.db"
    first, second = SqliteKnowledgeRepository(path, dim=8), SqliteKnowledgeRepository(path, dim=8)
    ids = first.add_many([_item(seed) for seed in range(3)])
    ids += second.add_many([_item(seed) for seed in range(3, 6)])
    ids += first.add_many([_item(seed) for seed in range(6, 9)])
    assert ids == sorted(set(ids))
    for seed, note_id in enumerate(ids):
        (hit, _), *_ = second.search(_vector(seed), 1, caller=OWNER, layer=Layer.PROJECT, statuses=RETRIEVABLE)
        assert hit.id == note_id and first.get(note_id).embedding.tolist() == _vector(seed).tolist()
    first.close()
    second.close()
