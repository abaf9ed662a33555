"""agentloop.adapters._rows: one converter maps rows to the ports' objects and back."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import numpy as np

from agentloop.adapters._rows import KNOWLEDGE_COLUMNS, knowledge_item, knowledge_row, knowledge_values, rows
from agentloop.components import ToolExecution
from agentloop.notes.models import KnowledgeItem, Layer, LayerIds, NoteMetadata, NoteStatus, NoteType
from agentloop.ports import TaskRecord, TaskState
from agentloop.scopes import Scope
from agentloop.testing.notes import make_execution

AT = datetime(2026, 1, 1, tzinfo=UTC)


def test_an_execution_is_text_columns_and_comes_back_equal() -> None:
    execution = make_execution("search", arguments={"q": "ü", "n": [1, 2]}, session_id="s1")
    row = rows.unstructure(execution)
    assert json.loads(row["arguments"]) == {"q": "ü", "n": [1, 2]} and row["started_at"] == execution.started_at.isoformat()
    assert rows.structure(row, ToolExecution) == execution


def test_a_task_keeps_its_scopes_as_key_texts_and_inputs_as_json() -> None:
    task = TaskRecord("t1", "report", {"topic": "cats"}, TaskState.CLAIMED, AT, AT, "agent", 2,
                      Scope(org_id="acme"), Scope(org_id="acme", session_id="s"), AT)
    row = rows.unstructure(task)
    assert (row["state"], row["scope"], row["attempts"]) == ("claimed", Scope(org_id="acme").key, 2)
    assert rows.structure(row, TaskRecord) == task


def test_a_note_spreads_its_owner_and_stores_its_vector_as_float32_bytes() -> None:
    item = KnowledgeItem(NoteType.PATTERN, Layer.PROJECT, LayerIds("acme", "o", None, "shop"), "title", "body",
                         np.array([0.5, -1.0], dtype=np.float32), AT,
                         NoteMetadata("traj-1", AT, "m", "s1", None, "shop", ("faq",)), flagged_for_review=True, id=7)
    row = knowledge_row(item)
    assert (row["company_id"], row["project_id"], row["flagged_for_review"]) == ("acme", "shop", 1)
    assert row["embedding"] == np.array([0.5, -1.0], dtype=np.float32).tobytes()
    back = knowledge_item(row)
    assert back == item and back.embedding.tolist() == [0.5, -1.0]


def test_a_notes_values_written_by_hand_are_the_converters() -> None:
    """`knowledge_values`, the bulk import's fast path, gives what `knowledge_row` gives, column by column."""
    bare = KnowledgeItem(NoteType.ADR, Layer.COMPANY, LayerIds("acme"), "t", "b", np.zeros(3, dtype=np.float32), AT)
    full = KnowledgeItem(NoteType.PATTERN, Layer.PROJECT, LayerIds("acme", "o", "t", "shop"), "title", "body ü",
                         np.array([0.5, -1.0], dtype=np.float64), AT,
                         NoteMetadata("traj-1", AT, "m", "s1", None, "shop", ("faq",)), flagged_for_review=True,
                         retrieval_count=3, usefulness_score=2, reference_count=1, updated_at=AT)
    for item in (bare, full):
        row = knowledge_row(item)
        assert knowledge_values(item) == tuple(row[column] for column in KNOWLEDGE_COLUMNS)


def test_a_note_read_by_hand_is_the_converters() -> None:
    """`knowledge_item`, which a search runs per hit, builds what the converter builds, from
    text columns (SQLite's) and from decoded ones (PostgreSQL's)."""
    bare = KnowledgeItem(NoteType.ADR, Layer.COMPANY, LayerIds("acme"), "t", "b", np.zeros(3, dtype=np.float32), AT, id=1)
    full = KnowledgeItem(NoteType.PATTERN, Layer.PROJECT, LayerIds("acme", "o", "t", "shop"), "title", "body ü",
                         np.array([0.5, -1.0], dtype=np.float32), AT,
                         NoteMetadata("traj-1", AT, "m", "s1", None, "shop", ("faq",)), NoteStatus.ACCEPTED, 9,
                         retrieval_count=3, usefulness_score=-2, reference_count=1, flagged_for_review=True, updated_at=AT)
    for item in (bare, full):
        row = knowledge_row(item)
        values = dict(row)
        values["layer_ids"] = {name: values.pop(name) for name in ("company_id", "org_id", "team_id", "project_id")}
        by_converter = rows.structure(values, KnowledgeItem)
        decoded = row | {"created_at": item.created_at, "updated_at": item.updated_at}
        for back in (knowledge_item(row), knowledge_item(decoded)):
            assert back == by_converter == item
            assert back.embedding.tolist() == item.embedding.tolist() and back.embedding.dtype == np.float32


def test_values_a_driver_already_decoded_are_taken_as_they_are() -> None:
    """A driver that returns timestamps and JSON decoded (as PostgreSQL's does) maps through the same converter."""
    execution = make_execution("search", session_id="s1")
    row = rows.unstructure(execution) | {"arguments": dict(execution.arguments), "started_at": execution.started_at}
    assert rows.structure(row, ToolExecution) == execution
