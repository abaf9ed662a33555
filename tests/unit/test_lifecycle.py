"""The note lifecycle and the quality rules."""

from __future__ import annotations

from datetime import UTC, datetime

import attrs
import numpy as np
import pytest

from agentloop.notes.errors import InvalidNoteTransitionError
from agentloop.notes import TRANSITIONS, KnowledgeItem, Layer, LayerIds, NoteStatus, NoteType, QualityRules, check_transition

ITEM = KnowledgeItem(NoteType.PATTERN, Layer.COMPANY, LayerIds(), "t", "md", np.ones(3), datetime(2026, 1, 1, tzinfo=UTC))


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (NoteStatus.DRAFT, NoteStatus.PROPOSED),
        (NoteStatus.PROPOSED, NoteStatus.ACCEPTED),
        (NoteStatus.ACCEPTED, NoteStatus.DEPRECATED),
        (NoteStatus.DRAFT, NoteStatus.REJECTED),
        (NoteStatus.PROPOSED, NoteStatus.REJECTED),
    ],
)
def test_the_lifecycle_edges_are_allowed(current: NoteStatus, target: NoteStatus) -> None:
    check_transition(1, current, target)


def test_every_other_move_raises_invalid_transition() -> None:
    allowed = {(a, b) for a, targets in TRANSITIONS.items() for b in targets}
    for current in NoteStatus:
        for target in NoteStatus:
            if (current, target) not in allowed:
                with pytest.raises(InvalidNoteTransitionError, match=f"cannot go from {current.value} to {target.value}"):
                    check_transition(3, current, target)
    assert issubclass(InvalidNoteTransitionError, ValueError)


def test_flag_needs_more_than_ten_retrievals_and_a_ratio_under_a_tenth() -> None:
    rules = QualityRules()
    assert not rules.should_flag(attrs.evolve(ITEM, retrieval_count=10))
    assert rules.should_flag(attrs.evolve(ITEM, retrieval_count=11))
    assert rules.should_flag(attrs.evolve(ITEM, retrieval_count=11, usefulness_score=1))
    assert not rules.should_flag(attrs.evolve(ITEM, retrieval_count=20, usefulness_score=2))


def test_propose_needs_a_draft_retrieved_more_than_five_times_and_a_ratio_over_eight_tenths() -> None:
    rules = QualityRules()
    assert not rules.should_propose(attrs.evolve(ITEM, retrieval_count=5, usefulness_score=5))
    assert rules.should_propose(attrs.evolve(ITEM, retrieval_count=6, usefulness_score=6))
    assert not rules.should_propose(attrs.evolve(ITEM, retrieval_count=10, usefulness_score=8))
    assert not rules.should_propose(attrs.evolve(ITEM, retrieval_count=6, usefulness_score=6, status=NoteStatus.PROPOSED))


def test_flagged_notes_rank_lower() -> None:
    rules = QualityRules()
    assert rules.ranking_score(attrs.evolve(ITEM, flagged_for_review=True), 0.8) < rules.ranking_score(ITEM, 0.8)
