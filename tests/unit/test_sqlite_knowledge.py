"""SqliteKnowledgeRepository: persistence, the derived index, errors, and the row re-check."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from agentloop import Scope
from agentloop.adapters import SqliteKnowledgeRepository
from agentloop.errors import UnknownNoteError
from agentloop.notes import KnowledgeItem, Layer, LayerIds, MergeSuggestion, NoteMetadata, NoteStatus, NoteType, RETRIEVABLE

AT = datetime(2026, 1, 1, tzinfo=UTC)
OWNER = LayerIds("acme", "o1", "t1", "p1")


def _vector(seed: int, dim: int = 8) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


def _item(seed: int, layer: Layer = Layer.PROJECT, owner: LayerIds = OWNER) -> KnowledgeItem:
    metadata = NoteMetadata("hash", AT, "m-1", "s1", "u1", owner.project_id, ("a", "b"))
    return KnowledgeItem(NoteType.PATTERN, layer, owner.truncated(layer), f"note {seed}", f"# note {seed}\n", _vector(seed), AT, metadata)


def test_items_and_counters_survive_a_reopen_and_the_index_is_reused(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    repository = SqliteKnowledgeRepository(path, dim=8)
    stored = [repository.add(_item(seed)) for seed in range(5)]
    repository.record_retrievals([stored[0].key], "q", Scope(session_id="s1"), AT)
    repository.close()
    assert (tmp_path / "k.db.hnsw").exists()
    reopened = SqliteKnowledgeRepository(path, dim=8)
    again = reopened.get(stored[0].key)
    assert again.retrieval_count == 1 and again.title == stored[0].title
    assert again.metadata == stored[0].metadata and np.array_equal(again.embedding, stored[0].embedding)
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


def test_unknown_ids_and_wrong_inputs_are_refused_with_a_reason(tmp_path: Path) -> None:
    repository = SqliteKnowledgeRepository(tmp_path / "k.db", dim=8)
    with pytest.raises(UnknownNoteError, match="no knowledge item with id 42"):
        repository.get(42)
    with pytest.raises(UnknownNoteError):
        repository.record_retrievals([42], "q", None, AT)
    with pytest.raises(ValueError, match="holds dim 8"):
        repository.add(KnowledgeItem(NoteType.PATTERN, Layer.COMPANY, LayerIds(), "t", "m", np.ones(3), AT))
    stored = repository.add(_item(1))
    with pytest.raises(ValueError, match="already stored"):
        repository.add(stored)
    repository.close()


def test_a_status_set_from_a_status_the_note_is_not_in_changes_nothing(tmp_path: Path) -> None:
    repository = SqliteKnowledgeRepository(tmp_path / "k.db", dim=8)
    note = repository.add(_item(1))
    assert repository.set_status(note.key, NoteStatus.PROPOSED, NoteStatus.ACCEPTED, AT) is None
    assert repository.get(note.key).status is NoteStatus.DRAFT
    moved = repository.set_status(note.key, NoteStatus.DRAFT, NoteStatus.PROPOSED, AT)
    assert moved is not None and moved.status is NoteStatus.PROPOSED
    with pytest.raises(UnknownNoteError):
        repository.set_status(42, NoteStatus.DRAFT, NoteStatus.PROPOSED, AT)
    repository.close()


def test_feedback_credits_each_seen_note_once_per_session(tmp_path: Path) -> None:
    repository = SqliteKnowledgeRepository(tmp_path / "k.db", dim=8)
    a, b = repository.add(_item(1)), repository.add(_item(2))
    repository.record_retrievals([a.key, b.key], "q", Scope(session_id="s1"), AT)
    repository.record_retrievals([a.key], "q2", Scope(session_id="s1"), AT)
    assert [i.usefulness_score for i in repository.credit_session(Scope(session_id="s1"), AT)] == [1, 1]
    assert repository.credit_session(Scope(session_id="s1"), AT) == []
    assert repository.credit_session(Scope(session_id="never-seen"), AT) == []
    assert repository.get(a.key).retrieval_count == 2
    repository.close()


def test_merge_suggestions_are_stored_once_per_pair(tmp_path: Path) -> None:
    repository = SqliteKnowledgeRepository(tmp_path / "k.db", dim=8)
    suggestion = MergeSuggestion(1, 2, 0.93, AT)
    assert repository.add_merge_suggestion(suggestion)
    assert not repository.add_merge_suggestion(suggestion)
    assert repository.merge_suggestions() == [suggestion]
    repository.close()


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


def test_layer_and_status_filters_apply_in_the_index(tmp_path: Path) -> None:
    repository = SqliteKnowledgeRepository(tmp_path / "k.db", dim=8)
    project = repository.add(_item(1, Layer.PROJECT))
    org = repository.add(_item(1, Layer.ORG))
    team_of_other_org = repository.add(_item(1, Layer.TEAM, LayerIds("acme", "o2", "t1", "p1")))
    hits = repository.search(_vector(1), 5, caller=OWNER, layer=Layer.TEAM, statuses=RETRIEVABLE)
    assert [i.key for i, _ in hits] == [org.key]
    repository.set_status(project.key, NoteStatus.DRAFT, NoteStatus.REJECTED, AT)
    hits = repository.search(_vector(1), 5, caller=OWNER, layer=Layer.PROJECT, statuses=RETRIEVABLE)
    assert [i.key for i, _ in hits] == [org.key]
    assert team_of_other_org.key not in {i.key for i, _ in hits}
    repository.close()


def test_items_lists_every_note_or_those_of_some_statuses_in_id_order(tmp_path: Path) -> None:
    repository = SqliteKnowledgeRepository(tmp_path / "k.db", dim=8)
    assert repository.items() == []
    stored = [repository.add(_item(seed)) for seed in range(3)]
    repository.set_status(stored[1].key, NoteStatus.DRAFT, NoteStatus.PROPOSED, AT)
    repository.set_status(stored[2].key, NoteStatus.DRAFT, NoteStatus.REJECTED, AT)
    assert [i.key for i in repository.items()] == [s.key for s in stored]
    assert [i.key for i in repository.items({NoteStatus.PROPOSED, NoteStatus.REJECTED})] == [stored[1].key, stored[2].key]
    assert repository.items(()) == []
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


def test_feedback_credits_only_what_the_same_chain_was_shown(tmp_path: Path) -> None:
    """I11: one session id in two orgs is two sessions: each credits what it was shown."""
    repository = SqliteKnowledgeRepository(tmp_path / "k.db", dim=8)
    a, b = repository.add(_item(1)), repository.add(_item(2))
    acme, globex = Scope(org_id="acme", session_id="s1"), Scope(org_id="globex", session_id="s1")
    repository.record_retrievals([a.key], "q", acme, AT)
    repository.record_retrievals([a.key, b.key], "q", globex, AT)
    assert [i.key for i in repository.credit_session(acme, AT)] == [a.key]
    assert [(i.key, i.usefulness_score) for i in repository.credit_session(globex, AT)] == [(a.key, 2), (b.key, 1)]
    assert [r.session for r in repository.retrievals(b.key)] == [globex]
    repository.close()
