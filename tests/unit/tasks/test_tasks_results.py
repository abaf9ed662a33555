"""Tests for agentloop.tasks.results: the history a sequence keeps of its finished steps."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from agentloop.tasks import AccumulationFormat, SequentialHistory, TaskResult

WHEN = datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("fmt", "seen"), [(AccumulationFormat.NOTES_ONLY, [None, None]), (AccumulationFormat.FULL_OUTPUT, ["one", "two"])]
)
def test_one_history_keeps_full_outputs_and_shows_later_steps_the_accumulation_format(
    fmt: AccumulationFormat, seen: list[str | None]
) -> None:
    """Later steps see content only under full_output; a failure's partial
    results still report every finished step in full. I10: notes are the same objects."""
    history = SequentialHistory(fmt)
    notes = [{"k": [1]}, {}]
    for step_id, content, step_notes in zip(("a", "b"), ("one", "two"), notes, strict=True):
        history.record(step_id, TaskResult(content, notes=step_notes), WHEN)
    assert [(entry.step_id, entry.output) for entry in history.outputs] == [("a", "one"), ("b", "two")]
    assert [entry.output for entry in history.snapshot()] == seen == [entry.output for entry in history]
    assert all(entry.notes is step_notes for entry, step_notes in zip(history.snapshot(), notes, strict=True))
    assert len(history) == 2
