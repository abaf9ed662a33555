"""The note lifecycle and the quality rules that move notes through it."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from agentloop.notes.errors import InvalidNoteTransitionError
from agentloop.notes.models import KnowledgeItem, NoteStatus

TRANSITIONS: Mapping[NoteStatus, frozenset[NoteStatus]] = {
    NoteStatus.DRAFT: frozenset({NoteStatus.PROPOSED, NoteStatus.REJECTED}),
    NoteStatus.PROPOSED: frozenset({NoteStatus.ACCEPTED, NoteStatus.REJECTED}),
    NoteStatus.ACCEPTED: frozenset({NoteStatus.DEPRECATED}),
    NoteStatus.DEPRECATED: frozenset(),
    NoteStatus.REJECTED: frozenset(),
}
"""The statuses each status may move to; every other move raises `InvalidNoteTransitionError`."""

RETRIEVABLE: frozenset[NoteStatus] = frozenset({NoteStatus.DRAFT, NoteStatus.PROPOSED, NoteStatus.ACCEPTED})
"""Statuses offered as context; drafts are included so usage can promote them."""


def check_transition(note_id: int | None, current: NoteStatus, target: NoteStatus) -> None:
    """Raise `InvalidNoteTransitionError` unless `current -> target` is a lifecycle edge."""
    allowed = TRANSITIONS[current]
    if target not in allowed:
        names = ", ".join(sorted(s.value for s in allowed)) or "nothing (it is final)"
        raise InvalidNoteTransitionError(note_id, current.value, target.value, names)


@attrs.frozen
class QualityRules:
    """When usage flags a note for review or proposes a draft.

    Usefulness ratio = usefulness_score / retrieval_count. Flag when retrieval_count >
    `flag_after` and ratio < `flag_below`; auto-propose a draft when retrieval_count >
    `propose_after` and ratio > `propose_above`. Flagged notes score `flagged_factor`
    times their similarity when ranked.
    """

    flag_after: int = 10
    flag_below: float = 0.1
    propose_after: int = 5
    propose_above: float = 0.8
    flagged_factor: float = 0.5

    def should_flag(self, item: KnowledgeItem) -> bool:
        return item.retrieval_count > self.flag_after and item.usefulness_ratio < self.flag_below

    def should_propose(self, item: KnowledgeItem) -> bool:
        return (
            item.status is NoteStatus.DRAFT
            and item.retrieval_count > self.propose_after
            and item.usefulness_ratio > self.propose_above
        )

    def ranking_score(self, item: KnowledgeItem, similarity: float) -> float:
        """The similarity, reduced for notes flagged for review."""
        return similarity * self.flagged_factor if item.flagged_for_review else similarity
