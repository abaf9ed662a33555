"""The knowledge base: semantic retrieval with tenant and layer scoping, quality-adjusted
ranking, usage tracking, the flag and auto-propose rules, merge suggestions and the
lifecycle, on top of a `KnowledgeRepository` and an `Embedder`."""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from agentloop._log import get_logger
from agentloop.notes.lifecycle import RETRIEVABLE, QualityRules, check_transition
from agentloop.notes.models import (
    KnowledgeItem,
    Layer,
    LayerIds,
    MaintainerNotice,
    MergeSuggestion,
    NoteStatus,
    NoticeKind,
    RetrievedNote,
)
from agentloop.ports.clock import Clock, SystemClock
from agentloop.retrieval import HybridWeights, fuse
from agentloop.telemetry import TELEMETRY

if TYPE_CHECKING:
    from agentloop.ports.knowledge import KnowledgeRepository, MaintainerNotifier
    from agentloop.ports.metrics import Metrics
    from agentloop.ports.vectors import Embedder, Vectors
    from agentloop.scopes import Scope

RESULTS_METRIC = "note_taking.retrieval.results_count"
LATENCY_METRIC = "note_taking.retrieval.latency_ms"

_NOT_REJECTED = frozenset(NoteStatus) - {NoteStatus.REJECTED}


@attrs.frozen
class RetrievalSettings:
    """Search defaults: top `k` above `min_similarity`, every layer of the caller's chain.

    `overfetch` candidates per wanted result are ranked, so a flagged note ranked down
    can be overtaken by a slightly less similar one. Notes holding the query's words are
    fused with the most similar ones as `hybrid` weighs them. Accepted notes
    more than `merge_above` similar produce a merge suggestion.
    """

    k: int = 5
    min_similarity: float = 0.2
    layer: Layer = Layer.PROJECT
    overfetch: int = 3
    merge_above: float = 0.9
    hybrid: HybridWeights = HybridWeights()


class KnowledgeBase:
    """What the rest of the framework asks of stored knowledge."""

    def __init__(
        self,
        repository: KnowledgeRepository,
        embedder: Embedder,
        *,
        notifier: MaintainerNotifier | None = None,
        rules: QualityRules | None = None,
        settings: RetrievalSettings | None = None,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        logger: Any = None,
    ) -> None:
        self.repository = repository
        self.embedder = embedder
        self.notifier = notifier
        self.rules = rules or QualityRules()
        self.settings = settings or RetrievalSettings()
        self.clock: Clock = clock or SystemClock()
        self.metrics = metrics
        self._log = logger if logger is not None else get_logger("agentloop.notes.knowledge")

    def embed(self, text: str) -> Vectors:
        """The vector of `text` (for scripts; code on an event loop awaits `aembed`)."""
        vector: Vectors = self.embedder.embed([text])[0]
        return vector

    async def aembed(self, text: str) -> Vectors:
        """The vector of `text`, awaited without holding up the event loop."""
        vector: Vectors = (await self.embedder.aembed([text]))[0]
        return vector

    async def add(self, item: KnowledgeItem) -> KnowledgeItem:
        """Store a new item as it is (its content is never changed afterwards, I10)."""
        return await self.repository.add(item)

    async def get(self, note_id: int) -> KnowledgeItem:
        return await self.repository.get(note_id)

    async def find_duplicate(
        self, vector: Vectors, *, owner: LayerIds, above: float
    ) -> tuple[KnowledgeItem, float] | None:
        """The most similar non-rejected item the owner can see, if more than `above` similar."""
        hits = await self.repository.search(
            vector, 1, caller=owner, layer=owner.narrowest(), statuses=_NOT_REJECTED, min_similarity=above
        )
        return hits[0] if hits and hits[0][1] > above else None

    async def add_reference(self, note_id: int) -> KnowledgeItem:
        return await self.repository.add_reference(note_id, self.clock.now())

    async def search(
        self,
        query: str,
        caller: LayerIds,
        *,
        layer: Layer | None = None,
        k: int | None = None,
        min_similarity: float | None = None,
    ) -> list[RetrievedNote]:
        """The best `k` retrievable notes for `query` in the caller's chain, without tracking.

        The notes at least `min_similarity` similar, most similar first, are fused with those
        of them holding the query's words, best keyword match first (`RetrievalSettings.hybrid`),
        which the vector side may have ranked too low to offer; a note's score is its fused
        score, reduced for notes flagged for review. On equal scores the narrower layer wins
        (project > team > org > company).
        """
        settings = self.settings
        k = settings.k if k is None else k
        vector = await self.aembed(query)
        if k <= 0:
            return []
        layer = settings.layer if layer is None else layer
        least = settings.min_similarity if min_similarity is None else min_similarity
        per_side = settings.hybrid.per_side(k * settings.overfetch)
        hits = await self.repository.search(
            vector, per_side, caller=caller, layer=layer, statuses=RETRIEVABLE, min_similarity=least
        ) if np.any(vector) else []
        similar = {item.key: (item, similarity) for item, similarity in hits}
        keyword = []
        if settings.hybrid.keyword > 0:
            found = await self.repository.keyword_search(query, per_side, caller=caller, layer=layer, statuses=RETRIEVABLE)
            for item, keyword_score in found:
                similarity = similar[item.key][1] if item.key in similar else _cosine(item.embedding, vector)
                if similarity >= least:  # a shared common word alone makes no note relevant
                    similar.setdefault(item.key, (item, similarity))
                    keyword.append((item.key, keyword_score))
        fused = fuse([(item.key, similarity) for item, similarity in hits], keyword, settings.hybrid)
        ranked = [
            RetrievedNote(similar[key][0], similar[key][1], self.rules.ranking_score(similar[key][0], score))
            for key, score in fused
        ]
        ranked.sort(key=lambda r: (-round(r.score, 9), r.item.layer.precedence, r.item.key))
        return ranked[:k]

    async def retrieve(
        self,
        query: str,
        caller: LayerIds,
        *,
        session: Scope | None = None,
        turn_id: str | None = None,
        layer: Layer | None = None,
        k: int | None = None,
        min_similarity: float | None = None,
    ) -> list[RetrievedNote]:
        """`search`, then count the retrieval (query, session by its `history_scope`, and turn
        recorded) and apply the quality rules; emits the retrieval metrics (docs/notes.md)."""
        started = perf_counter()
        results = await self.search(query, caller, layer=layer, k=k, min_similarity=min_similarity)
        if results:
            updated = await self.repository.record_retrievals(
                [r.item.key for r in results], query, session, self.clock.now(), turn_id
            )
            by_id = {item.key: await self._apply_rules(item) for item in updated}
            results = [attrs.evolve(r, item=by_id.get(r.item.key, r.item)) for r in results]
        metrics = TELEMETRY.metrics_for(self.metrics)
        if metrics is not None:
            metrics.observe(RESULTS_METRIC, float(len(results)))
            metrics.observe(LATENCY_METRIC, (perf_counter() - started) * 1000.0)
        return results

    async def record_feedback(self, session: Scope, *, positive: bool, turn_id: str | None = None) -> list[KnowledgeItem]:
        """Positive feedback on a session (its `history_scope`) adds one to the usefulness of
        every note that session was shown — in turn `turn_id` only, when given — once per
        session; the credited notes after the rules ran."""
        if not positive:
            self._log.info("notes.feedback", session_id=session.session_id, turn_id=turn_id, positive=False)
            return []
        credited = await self.repository.credit_session(session, self.clock.now(), turn_id)
        self._log.info(
            "notes.feedback", session_id=session.session_id, turn_id=turn_id, positive=True,
            credited=[i.key for i in credited],
        )
        return [await self._apply_rules(item) for item in credited]

    async def transition(self, note_id: int, target: NoteStatus) -> KnowledgeItem:
        """Move a note along its lifecycle (`InvalidNoteTransitionError` otherwise); accepting one
        looks for accepted notes to suggest merging with."""
        item = await self._move(note_id, target)
        self._log.info("notes.transition", note_id=note_id, status=target.value)
        if target is NoteStatus.ACCEPTED:
            await self._suggest_merges(item)
        return item

    async def _move(self, note_id: int, target: NoteStatus) -> KnowledgeItem:
        """Set the note's status to `target` if the lifecycle allows the move from the status
        it is in; the store only compares and sets, so every backend keeps the lifecycle."""
        # Each lost race means another writer moved the note on, and the lifecycle has no
        # cycles, so this ends: moved, or refused from the status it reached.
        while True:
            current = await self.repository.get(note_id)
            check_transition(note_id, current.status, target)
            moved = await self.repository.set_status(note_id, current.status, target, self.clock.now())
            if moved is not None:
                return moved

    async def merge_suggestions(self) -> list[MergeSuggestion]:
        return await self.repository.merge_suggestions()

    async def _apply_rules(self, item: KnowledgeItem) -> KnowledgeItem:
        rules = self.rules
        flag = rules.should_flag(item)
        if flag != item.flagged_for_review:
            item = await self.repository.set_flag(item.key, flag, self.clock.now())
            if flag:
                self._notify(
                    NoticeKind.NOTE_FLAGGED, (item.key,),
                    f"note {item.key} ({item.title!r}) was useful in {item.usefulness_score} of "
                    f"{item.retrieval_count} retrievals; review or deprecate it",
                )
        if rules.should_propose(item):
            item = await self._move(item.key, NoteStatus.PROPOSED)
            self._notify(
                NoticeKind.NOTE_PROPOSED, (item.key,),
                f"draft note {item.key} ({item.title!r}) was useful in {item.usefulness_score} of "
                f"{item.retrieval_count} retrievals and is proposed for acceptance",
            )
        return item

    async def _suggest_merges(self, item: KnowledgeItem) -> None:
        """Suggest merging `item` with every accepted note above `merge_above` cosine that
        shares its tenant chain, above or below its layer, so the suggestions do not depend
        on which of the two was accepted first. Acceptance is a rare maintainer step, so
        an exact pass over the accepted notes is affordable."""
        above = self.settings.merge_above
        for other in await self.repository.items(frozenset({NoteStatus.ACCEPTED})):
            if other.key == item.key or not _share_chain(item, other):
                continue
            similarity = _cosine(item.embedding, other.embedding)
            if similarity <= above:
                continue
            first, second = sorted((item.key, other.key))
            if await self.repository.add_merge_suggestion(MergeSuggestion(first, second, similarity, self.clock.now())):
                self._notify(
                    NoticeKind.MERGE_SUGGESTED, (first, second),
                    f"accepted notes {first} and {second} are {similarity:.3f} similar; consider merging them "
                    f"(nothing is merged automatically)",
                )

    def _notify(self, kind: NoticeKind, note_ids: tuple[int, ...], message: str) -> None:
        self._log.info("notes.notice", kind=kind.value, note_ids=list(note_ids))
        if self.notifier is not None:
            self.notifier.notify(MaintainerNotice(kind, note_ids, message, self.clock.now()))


def _share_chain(a: KnowledgeItem, b: KnowledgeItem) -> bool:
    """Whether the narrower note's chain may see the broader note (I11); a chain without
    an id at the broader note's layer (a note with no org beside an org note) cannot."""
    broad, narrow = sorted((a, b), key=lambda item: item.layer.depth)
    return broad.layer_ids in narrow.layer_ids.visible_owners()


def _cosine(a: Vectors, b: Vectors) -> float:
    norms = float(np.linalg.norm(a)) * float(np.linalg.norm(b))
    return float(np.dot(a, b)) / norms if norms > 0 else 0.0

