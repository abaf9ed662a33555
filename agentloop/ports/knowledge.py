"""The KnowledgeRepository and MaintainerNotifier ports of the note-taking domain."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agentloop.privacy import Subject

if TYPE_CHECKING:
    from agentloop.notes.models import (
        KnowledgeItem,
        Layer,
        LayerIds,
        MaintainerNotice,
        MergeSuggestion,
        NoteStatus,
        Retrieval,
    )
    from agentloop.ports.vectors import Vectors
    from agentloop.scopes import Scope


@runtime_checkable
class KnowledgeRepository(Protocol):
    """Stored knowledge items with cosine search, usage counters and lifecycle.

    Every call is a coroutine. Every method that takes a note id raises `UnknownNoteError`
    for an id never stored.
    """

    async def count(self) -> int:
        """How many items are stored, whatever their status."""
        ...

    async def add(self, item: KnowledgeItem) -> KnowledgeItem:
        """Store a new item (its `id` must be None) and return it with its id; `ValueError`
        for a stored item or an embedding of another dimension than the repository holds."""
        ...

    async def add_many(self, items: Sequence[KnowledgeItem]) -> list[int]:
        """Store new items at once (a bulk import) and return their ids, in order."""
        ...

    async def get(self, note_id: int) -> KnowledgeItem: ...

    async def items(self, statuses: Collection[NoteStatus] | None = None) -> list[KnowledgeItem]:
        """Every stored item, or those with one of `statuses`, in id order (for review tools)."""
        ...

    async def search(
        self,
        vector: Vectors,
        k: int,
        *,
        caller: LayerIds,
        layer: Layer,
        statuses: Collection[NoteStatus],
        min_similarity: float = 0.0,
    ) -> list[tuple[KnowledgeItem, float]]:
        """Up to `k` items with these statuses and cosine similarity >= `min_similarity`,
        most similar first, of `layer` or its parents and visible to `caller` (I11)."""
        ...

    async def keyword_search(
        self, text: str, k: int, *, caller: LayerIds, layer: Layer, statuses: Collection[NoteStatus]
    ) -> list[tuple[KnowledgeItem, float]]:
        """Up to `k` items with these statuses, visible to `caller` as `search` says (I11), whose
        title or text holds words of `text` (each word whole, an identifier such as `ORD-48213`
        in order), best keyword match first, each with its keyword score (higher is better,
        equal for items the index cannot tell apart): the keyword side of hybrid retrieval.
        Any text is a valid query; one with no letter or digit finds nothing."""
        ...

    async def record_retrievals(
        self, note_ids: Sequence[int], query: str, session: Scope | None, at: datetime, turn_id: str | None = None
    ) -> list[KnowledgeItem]:
        """Add one to each note's retrieval_count, log the query, the session with its
        whole chain (its `history_scope`) and the turn that was shown them; the updated items."""
        ...

    async def retrievals(self, note_id: int) -> list[Retrieval]:
        """Every recorded retrieval of the note, oldest first."""
        ...

    async def credit_session(self, session: Scope, at: datetime, turn_id: str | None = None) -> list[KnowledgeItem]:
        """Add one to usefulness_score of each note shown to this session (this id within
        this chain, never a namesake in another chain) — only those shown in turn `turn_id`
        when given — once per session; the items credited now (none on a repeated call)."""
        ...

    async def add_reference(self, note_id: int, at: datetime) -> KnowledgeItem:
        """Add one to the note's reference_count (a duplicate pointed at it)."""
        ...

    async def set_flag(self, note_id: int, flagged: bool, at: datetime) -> KnowledgeItem:
        """Store the review flag as given; when a note deserves it is `QualityRules`' decision."""
        ...

    async def set_status(
        self, note_id: int, expected: NoteStatus, target: NoteStatus, at: datetime
    ) -> KnowledgeItem | None:
        """Compare-and-set: move the note to `target` if its status is still `expected`, and
        return it; None, changing nothing, if another writer moved it first. Which moves the
        lifecycle allows is not the store's to decide (`KnowledgeBase.transition` does)."""
        ...

    async def add_merge_suggestion(self, suggestion: MergeSuggestion) -> bool:
        """Store a suggestion; False if this pair (as given, in this order) was already suggested."""
        ...

    async def merge_suggestions(self) -> list[MergeSuggestion]: ...

    async def erase(self, subject: Subject) -> int:
        """Remove every row of `subject` (`agentloop.privacy`) in one transaction; how many (0 when run again)."""
        ...

    def export(self, subject: Subject) -> AsyncIterator[dict[str, Any]]:
        """Every row kept about `subject`, one JSON-ready record at a time (docs/privacy.md gives each shape)."""
        ...


@runtime_checkable
class MaintainerNotifier(Protocol):
    """Tells the people who curate knowledge that something needs their review."""

    def notify(self, notice: MaintainerNotice) -> None: ...
