"""The knowledge repository suite: notes, search by chain and status, counters, credits, compare-and-set moves, merges."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import attrs
import numpy as np
import pytest

from agentloop.ports.stores import Stores
from agentloop.notes.errors import UnknownNoteError
from agentloop.notes.models import KnowledgeItem, Layer, LayerIds, MergeSuggestion, NoteMetadata, NoteStatus, NoteType
from agentloop.ports.vectors import Vectors
from agentloop.scopes import Scope
from agentloop.testing.stores._kit import AT, CHAIN, LATER, Backend, at_once, namesakes, run


def unit_vector(seed: int, dim: int) -> Vectors:
    """A reproducible random unit vector: notes with distinct seeds are barely similar."""
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


OWNER = LayerIds("acme", "o1", "t1", "p1")


class KnowledgeRepositoryTests(Backend):
    """`KnowledgeRepository`: notes, visibility by chain and layer, counters and compare-and-set."""

    @staticmethod
    def note(stores: Stores, seed: int, layer: Layer = Layer.PROJECT, owner: LayerIds = OWNER) -> KnowledgeItem:
        metadata = NoteMetadata("hash", AT, "m-1", "s1", "u1", owner.project_id, ("a", "b"))
        return KnowledgeItem(
            NoteType.PATTERN, layer, owner.truncated(layer), f"note {seed}", f"# note {seed}\n",
            unit_vector(seed, stores.embedder.dim), AT, metadata,
        )

    def add(self, stores: Stores, seed: int, layer: Layer = Layer.PROJECT, owner: LayerIds = OWNER) -> KnowledgeItem:
        return run(stores.knowledge.add(self.note(stores, seed, layer, owner)))

    def test_an_added_note_comes_back_whole_with_its_id(self, stores: Stores) -> None:
        note = self.note(stores, 1)
        stored = run(stores.knowledge.add(note))
        assert stored.id is not None and attrs.evolve(stored, id=None) == note
        again = run(stores.knowledge.get(stored.key))
        assert again == stored and np.array_equal(again.embedding, note.embedding)
        with pytest.raises(ValueError, match="already stored"):
            run(stores.knowledge.add(stored))
        with pytest.raises(ValueError):
            run(stores.knowledge.add(attrs.evolve(note, embedding=np.ones(stores.embedder.dim + 1))))
        assert run(stores.knowledge.count()) == 1

    def test_add_many_returns_the_ids_in_order(self, stores: Stores) -> None:
        notes = [self.note(stores, seed) for seed in range(3)]
        ids = run(stores.knowledge.add_many(notes))
        assert [run(stores.knowledge.get(i)).title for i in ids] == ["note 0", "note 1", "note 2"]
        assert len(set(ids)) == 3 and run(stores.knowledge.add_many([])) == []
        assert run(stores.knowledge.count()) == 3

    def test_an_id_never_stored_is_an_unknown_note_for_every_call(self, stores: Stores) -> None:
        unknown = self.add(stores, 1).key + 4242
        calls: list[Callable[[], Coroutine[Any, Any, object]]] = [
            lambda: stores.knowledge.get(unknown),
            lambda: stores.knowledge.retrievals(unknown),
            lambda: stores.knowledge.record_retrievals([unknown], "q", None, AT),
            lambda: stores.knowledge.add_reference(unknown, AT),
            lambda: stores.knowledge.set_flag(unknown, True, AT),
            lambda: stores.knowledge.set_status(unknown, NoteStatus.DRAFT, NoteStatus.PROPOSED, AT),
        ]
        for call in calls:
            with pytest.raises(UnknownNoteError, match=f"no knowledge item with id {unknown}"):
                run(call())

    def test_items_lists_every_note_or_those_of_some_statuses_in_id_order(self, stores: Stores) -> None:
        assert run(stores.knowledge.items()) == []
        stored = [self.add(stores, seed) for seed in range(3)]
        run(stores.knowledge.set_status(stored[1].key, NoteStatus.DRAFT, NoteStatus.PROPOSED, AT))
        run(stores.knowledge.set_status(stored[2].key, NoteStatus.DRAFT, NoteStatus.REJECTED, AT))
        assert [i.key for i in run(stores.knowledge.items())] == [s.key for s in stored]
        both = run(stores.knowledge.items({NoteStatus.PROPOSED, NoteStatus.REJECTED}))
        assert [i.key for i in both] == [stored[1].key, stored[2].key]
        assert run(stores.knowledge.items(())) == []

    def test_search_returns_the_k_most_similar_above_the_threshold_best_first(self, stores: Stores) -> None:
        stored = [self.add(stores, seed) for seed in range(6)]
        statuses = {NoteStatus.DRAFT}
        query = unit_vector(3, stores.embedder.dim)
        hits = run(stores.knowledge.search(query, 4, caller=OWNER, layer=Layer.PROJECT, statuses=statuses, min_similarity=-1.0))
        assert len(hits) == 4 and hits[0][0].key == stored[3].key and hits[0][1] == pytest.approx(1.0, abs=1e-5)
        similarities = [similarity for _, similarity in hits]
        assert similarities == sorted(similarities, reverse=True)
        everything = run(stores.knowledge.search(query, 10, caller=OWNER, layer=Layer.PROJECT, statuses=statuses, min_similarity=-1.0))
        assert len(everything) == 6
        close = run(stores.knowledge.search(query, 10, caller=OWNER, layer=Layer.PROJECT, statuses=statuses, min_similarity=0.9))
        assert [i.key for i, _ in close] == [stored[3].key]
        assert run(stores.knowledge.search(query, 0, caller=OWNER, layer=Layer.PROJECT, statuses=statuses)) == []
        assert run(stores.knowledge.search(query, 5, caller=OWNER, layer=Layer.PROJECT, statuses=())) == []

    def test_search_sees_only_the_statuses_asked_for_as_they_are_now(self, stores: Stores) -> None:
        draft, moved = self.add(stores, 1), self.add(stores, 2)
        run(stores.knowledge.set_status(moved.key, NoteStatus.DRAFT, NoteStatus.REJECTED, AT))
        dim = stores.embedder.dim

        def found(statuses: set[NoteStatus]) -> set[int]:
            hits = run(stores.knowledge.search(unit_vector(2, dim), 5, caller=OWNER, layer=Layer.PROJECT,
                                               statuses=statuses, min_similarity=-1.0))
            return {item.key for item, _ in hits}

        assert found({NoteStatus.DRAFT}) == {draft.key}
        assert found({NoteStatus.REJECTED}) == {moved.key}
        assert found({NoteStatus.DRAFT, NoteStatus.REJECTED}) == {draft.key, moved.key}

    def test_a_caller_sees_its_chain_at_the_layer_asked_and_above_and_no_other_chain(self, stores: Stores) -> None:
        """I11: a note is visible exactly to the chains `LayerIds.visible_owners` names, so a
        namesake chain sees only the parents it really shares."""
        mine = {layer: self.add(stores, 1, layer).key for layer in Layer}
        namesake_owners = [
            LayerIds("other", "o1", "t1", "p1"), LayerIds("acme", "o2", "t1", "p1"),
            LayerIds("acme", "o1", "t2", "p1"), LayerIds("acme", "o1", "t1", "p2"),
        ]
        theirs = {owner: self.add(stores, 1, Layer.PROJECT, owner).key for owner in namesake_owners}
        dim = stores.embedder.dim

        def seen(caller: LayerIds, layer: Layer) -> set[int]:
            hits = run(stores.knowledge.search(unit_vector(1, dim), 20, caller=caller, layer=layer,
                                               statuses={NoteStatus.DRAFT}, min_similarity=-1.0))
            return {item.key for item, _ in hits}

        assert seen(OWNER, Layer.PROJECT) == set(mine.values())
        assert seen(OWNER, Layer.TEAM) == {mine[Layer.COMPANY], mine[Layer.ORG], mine[Layer.TEAM]}
        assert seen(namesake_owners[0], Layer.PROJECT) == {theirs[namesake_owners[0]]}
        assert seen(namesake_owners[1], Layer.PROJECT) == {mine[Layer.COMPANY], theirs[namesake_owners[1]]}
        assert seen(namesake_owners[2], Layer.PROJECT) == {mine[Layer.COMPANY], mine[Layer.ORG], theirs[namesake_owners[2]]}
        assert seen(namesake_owners[3], Layer.PROJECT) == {
            mine[Layer.COMPANY], mine[Layer.ORG], mine[Layer.TEAM], theirs[namesake_owners[3]]
        }

    def test_keyword_search_finds_an_identifier_within_the_chain_and_statuses_asked(self, stores: Stores) -> None:
        """I11 on the keyword side: a namesake chain never finds the note by its words, and a
        rejected note leaves the keyword results as it leaves the vector ones."""
        def titled(title: str, owner: LayerIds = OWNER) -> KnowledgeItem:
            return run(stores.knowledge.add(attrs.evolve(self.note(stores, 1, owner=owner), title=title)))

        notes = [titled(f"Refund stuck for order ORD-482{n:02d}") for n in range(10, 20)]
        other = titled("Refund stuck for order ORD-48213", LayerIds("other", "o1", "t1", "p1"))

        def found(text: str, caller: LayerIds = OWNER, statuses: frozenset[NoteStatus] = frozenset({NoteStatus.DRAFT})) -> list[int]:
            items = run(stores.knowledge.keyword_search(text, 3, caller=caller, layer=Layer.PROJECT, statuses=statuses))
            scores = [score for _, score in items]
            assert scores == sorted(scores, reverse=True)
            return [item.key for item, _ in items]

        assert found("why is ORD-48213 not refunded")[0] == notes[3].key
        assert other.key not in found("ORD-48213") and found("ORD-48213", LayerIds("other", "o1", "t1", "p1")) == [other.key]
        assert found("!!! \"\" *") == [] and found("ORD-48213", statuses=frozenset()) == []
        run(stores.knowledge.set_status(notes[3].key, NoteStatus.DRAFT, NoteStatus.REJECTED, AT))
        assert notes[3].key not in found("ORD-48213")
        assert found("ORD-48213", statuses=frozenset({NoteStatus.REJECTED})) == [notes[3].key]

    def test_retrievals_are_counted_and_logged_with_the_sessions_chain(self, stores: Stores) -> None:
        a, b = self.add(stores, 1), self.add(stores, 2)
        counted = run(stores.knowledge.record_retrievals([a.key, b.key], "first", CHAIN, AT))
        assert [(i.key, i.retrieval_count) for i in counted] == [(a.key, 1), (b.key, 1)]
        run(stores.knowledge.record_retrievals([a.key], "second", None, LATER))
        assert run(stores.knowledge.record_retrievals([], "nothing", CHAIN, AT)) == []
        assert run(stores.knowledge.get(a.key)).retrieval_count == 2
        logged = run(stores.knowledge.retrievals(a.key))
        assert [(r.note_id, r.query, r.session_id, r.at, r.session) for r in logged] == [
            (a.key, "first", "s1", AT, CHAIN), (a.key, "second", None, LATER, None),
        ]
        assert run(stores.knowledge.retrievals(self.add(stores, 3).key)) == []

    def test_a_session_credits_each_note_it_was_shown_once(self, stores: Stores) -> None:
        a, b = self.add(stores, 1), self.add(stores, 2)
        session = Scope(session_id="s1")
        run(stores.knowledge.record_retrievals([a.key, b.key], "q", session, AT))
        run(stores.knowledge.record_retrievals([a.key], "q2", session, AT))
        assert [(i.key, i.usefulness_score) for i in run(stores.knowledge.credit_session(session, AT))] == [
            (a.key, 1), (b.key, 1),
        ]
        assert run(stores.knowledge.credit_session(session, AT)) == []
        assert run(stores.knowledge.credit_session(Scope(session_id="never-seen"), AT)) == []
        assert run(stores.knowledge.get(a.key)).usefulness_score == 1

    def test_feedback_on_a_turn_credits_what_that_turn_was_shown_once_per_session(self, stores: Stores) -> None:
        a, b, c = self.add(stores, 1), self.add(stores, 2), self.add(stores, 3)
        session = Scope(session_id="s1")
        run(stores.knowledge.record_retrievals([a.key], "q1", session, AT, "turn-1"))
        run(stores.knowledge.record_retrievals([a.key, b.key], "q2", session, LATER, "turn-2"))
        run(stores.knowledge.record_retrievals([c.key], "q3", session, LATER))
        assert [r.turn_id for r in run(stores.knowledge.retrievals(a.key))] == ["turn-1", "turn-2"]
        assert run(stores.knowledge.credit_session(session, AT, "turn-unknown")) == []
        assert run(stores.knowledge.credit_session(Scope(session_id="s2"), AT, "turn-1")) == []
        assert [(i.key, i.usefulness_score) for i in run(stores.knowledge.credit_session(session, AT, "turn-1"))] == [
            (a.key, 1),
        ]
        assert [i.key for i in run(stores.knowledge.credit_session(session, AT, "turn-2"))] == [b.key]
        assert [i.key for i in run(stores.knowledge.credit_session(session, AT))] == [c.key]
        assert run(stores.knowledge.get(a.key)).usefulness_score == 1

    def test_a_session_credits_only_what_its_own_chain_was_shown(self, stores: Stores) -> None:
        """I11: one session id under two chains is two sessions: each credits what it was shown."""
        a, b = self.add(stores, 1), self.add(stores, 2)
        run(stores.knowledge.record_retrievals([a.key], "q", CHAIN, AT))
        for other in namesakes(CHAIN, ("company_id", "org_id", "team_id", "project_id", "user_id")):
            run(stores.knowledge.record_retrievals([a.key, b.key], "q", other, AT))
        assert [i.key for i in run(stores.knowledge.credit_session(CHAIN, AT))] == [a.key]
        credited = run(stores.knowledge.credit_session(attrs.evolve(CHAIN, org_id="other-org_id"), AT))
        assert [(i.key, i.usefulness_score) for i in credited] == [(a.key, 2), (b.key, 1)]

    def test_references_and_flags_are_stored_as_given(self, stores: Stores) -> None:
        note = self.add(stores, 1)
        assert run(stores.knowledge.add_reference(note.key, AT)).reference_count == 1
        assert run(stores.knowledge.add_reference(note.key, LATER)).reference_count == 2
        assert run(stores.knowledge.set_flag(note.key, True, AT)).flagged_for_review
        assert run(stores.knowledge.set_flag(note.key, True, AT)).flagged_for_review
        assert not run(stores.knowledge.set_flag(note.key, False, AT)).flagged_for_review
        again = run(stores.knowledge.get(note.key))
        assert (again.reference_count, again.flagged_for_review) == (2, False)

    def test_a_status_is_set_only_from_the_status_expected(self, stores: Stores) -> None:
        note = self.add(stores, 1)
        assert run(stores.knowledge.set_status(note.key, NoteStatus.PROPOSED, NoteStatus.ACCEPTED, AT)) is None
        assert run(stores.knowledge.get(note.key)).status is NoteStatus.DRAFT
        moved = run(stores.knowledge.set_status(note.key, NoteStatus.DRAFT, NoteStatus.PROPOSED, LATER))
        assert moved is not None and moved.status is NoteStatus.PROPOSED and moved.key == note.key
        assert run(stores.knowledge.get(note.key)).status is NoteStatus.PROPOSED

    def test_of_writers_moving_one_note_at_once_exactly_one_wins(self, stores: Stores) -> None:
        note = self.add(stores, 1)
        targets = [NoteStatus.PROPOSED, NoteStatus.REJECTED] * 4
        moved = at_once(lambda target: stores.knowledge.set_status(note.key, NoteStatus.DRAFT, target, AT), targets)
        winners = [item for item in moved if item is not None]
        assert len(winners) == 1 and run(stores.knowledge.get(note.key)).status is winners[0].status

    def test_concurrent_counts_all_count(self, stores: Stores) -> None:
        note = self.add(stores, 1)
        sessions = [Scope(session_id=f"s{n}") for n in range(12)]
        at_once(lambda session: stores.knowledge.record_retrievals([note.key], "q", session, AT), sessions)
        at_once(lambda note_id: stores.knowledge.add_reference(note_id, AT), [note.key] * 12)
        at_once(lambda session: stores.knowledge.credit_session(session, AT), sessions)
        after = run(stores.knowledge.get(note.key))
        assert (after.retrieval_count, after.reference_count, after.usefulness_score) == (12, 12, 12)
        assert len(run(stores.knowledge.retrievals(note.key))) == 12

    def test_a_merge_pair_is_kept_once_in_the_order_given(self, stores: Stores) -> None:
        one, two = self.add(stores, 1).key, self.add(stores, 2).key
        first = MergeSuggestion(one, two, 0.93, AT)
        assert run(stores.knowledge.add_merge_suggestion(first))
        assert not run(stores.knowledge.add_merge_suggestion(first))
        assert not run(stores.knowledge.add_merge_suggestion(attrs.evolve(first, similarity=0.5, created_at=LATER)))
        reversed_pair = MergeSuggestion(two, one, 0.93, LATER)
        assert run(stores.knowledge.add_merge_suggestion(reversed_pair))
        assert sorted(run(stores.knowledge.merge_suggestions()), key=lambda s: s.first_id) == [first, reversed_pair]

    def test_notes_counters_and_suggestions_survive_a_reopen(
        self, stores: Stores, open_backend: Callable[[], Stores]
    ) -> None:
        stored = [self.add(stores, seed) for seed in range(5)]
        run(stores.knowledge.record_retrievals([stored[0].key], "q", CHAIN, AT))
        run(stores.knowledge.set_status(stored[1].key, NoteStatus.DRAFT, NoteStatus.PROPOSED, AT))
        run(stores.knowledge.add_merge_suggestion(MergeSuggestion(stored[0].key, stored[1].key, 0.93, AT)))
        before = run(stores.knowledge.items())
        stores.close()
        with open_backend() as again:
            after = run(again.knowledge.items())
            assert after == before and run(again.knowledge.count()) == 5
            assert all(np.array_equal(a.embedding, b.embedding) for a, b in zip(after, before, strict=True))
            assert [r.query for r in run(again.knowledge.retrievals(stored[0].key))] == ["q"]
            assert len(run(again.knowledge.merge_suggestions())) == 1
            (hit, similarity), *_ = run(again.knowledge.search(
                unit_vector(3, again.embedder.dim), 1, caller=OWNER, layer=Layer.PROJECT, statuses={NoteStatus.DRAFT}
            ))
            assert hit.key == stored[3].key and similarity == pytest.approx(1.0, abs=1e-5)
