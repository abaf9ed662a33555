"""KnowledgeBase: scoped retrieval (I11), ranking, usage counters, the quality rules and
the lifecycle, with stored content never modified (I10)."""

from __future__ import annotations

import asyncio
import itertools
import tempfile
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import attrs
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from agentloop import Scope
from agentloop.adapters import InMemoryMetrics, RecordingNotifier, open_stores
from agentloop.adapters.embedders.hashing import HashingEmbedder
from agentloop.notes.errors import InvalidNoteTransitionError
from agentloop.notes import (
    RETRIEVABLE,
    TRANSITIONS,
    KnowledgeBase,
    KnowledgeItem,
    Layer,
    LayerIds,
    NoteStatus,
    NoteType,
    NoticeKind,
    QualityRules,
    RetrievalSettings,
)
from agentloop.retrieval import HybridWeights
from agentloop.testing import FakeClock

EMBEDDER = HashingEmbedder()
WORDS = ["retry", "network", "deploy", "cache", "login", "schema", "backup", "queue", "index", "token"]
ORGS, TEAMS, PROJECTS = ["o1", "o2"], ["t1", "t2"], ["p1", "p2", "p3"]


def _chain(org: str, team: str, project: str) -> LayerIds:
    return LayerIds("default", org, team, project)


def _item(text: str, layer: Layer, owner: LayerIds, title: str | None = None) -> KnowledgeItem:
    return KnowledgeItem(
        NoteType.PATTERN, layer, owner.truncated(layer), title or text, text, EMBEDDER.embed([text])[0],
        datetime(2026, 1, 1, tzinfo=UTC),
    )


@pytest.fixture
def knowledge(tmp_path: Path) -> Iterator[KnowledgeBase]:
    stores = open_stores(tmp_path, embedder=EMBEDDER)
    repository = stores.knowledge
    yield KnowledgeBase(repository, EMBEDDER, notifier=RecordingNotifier(), clock=FakeClock(), metrics=InMemoryMetrics())
    stores.close()


def test_retrieval_counts_and_records_the_query_and_session(knowledge: KnowledgeBase) -> None:
    owner = _chain("o1", "t1", "p1")
    note = asyncio.run(knowledge.add(_item("rotate the api token every month", Layer.PROJECT, owner)))
    (found,) = asyncio.run(knowledge.retrieve("when to rotate the api token", owner, session=Scope(session_id="s9")))
    assert found.item.key == note.key and found.item.retrieval_count == 1
    (retrieval,) = asyncio.run(knowledge.repository.retrievals(note.key))
    assert (retrieval.query, retrieval.session_id) == ("when to rotate the api token", "s9")
    assert retrieval.session == Scope(session_id="s9")


def test_results_stay_above_the_threshold_and_within_k(knowledge: KnowledgeBase) -> None:
    owner = _chain("o1", "t1", "p1")
    for text in ["retry network calls", "retry network calls with backoff", "retry network calls twice", "bake bread"]:
        asyncio.run(knowledge.add(_item(text, Layer.PROJECT, owner)))
    found = asyncio.run(knowledge.search("retry network calls", owner, k=2, min_similarity=0.3))
    assert len(found) == 2 and all(r.similarity >= 0.3 for r in found)
    assert found[0].item.title == "retry network calls"
    assert asyncio.run(knowledge.search("", owner)) == []


def test_deprecated_and_rejected_notes_are_not_offered(knowledge: KnowledgeBase) -> None:
    owner = _chain("o1", "t1", "p1")
    gone = asyncio.run(knowledge.add(_item("old deploy steps", Layer.PROJECT, owner)))
    asyncio.run(knowledge.transition(gone.key, NoteStatus.REJECTED))
    assert asyncio.run(knowledge.search("old deploy steps", owner)) == []


def test_negative_feedback_credits_nothing(knowledge: KnowledgeBase) -> None:
    owner = _chain("o1", "t1", "p1")
    note = asyncio.run(knowledge.add(_item("rotate the api token", Layer.PROJECT, owner)))
    asyncio.run(knowledge.retrieve("rotate the api token", owner, session=Scope(session_id="s1")))
    assert asyncio.run(knowledge.record_feedback(Scope(session_id="s1"), positive=False)) == []
    assert asyncio.run(knowledge.get(note.key)).usefulness_score == 0


def test_accepting_a_note_suggests_merges_only_with_accepted_similar_notes(knowledge: KnowledgeBase) -> None:
    owner = _chain("o1", "t1", "p1")
    a = asyncio.run(knowledge.add(_item("cache the schema lookups per request", Layer.PROJECT, owner, "a")))
    b = asyncio.run(knowledge.add(_item("cache the schema lookups per request", Layer.PROJECT, owner, "b")))
    c = asyncio.run(knowledge.add(_item("cache the schema lookups per request", Layer.PROJECT, _chain("o2", "t2", "p2"), "c")))
    for note in (a, b, c):
        asyncio.run(knowledge.transition(note.key, NoteStatus.PROPOSED))
        asyncio.run(knowledge.transition(note.key, NoteStatus.ACCEPTED))
    (suggestion,) = asyncio.run(knowledge.merge_suggestions())
    assert (suggestion.first_id, suggestion.second_id) == (a.key, b.key)
    assert [asyncio.run(knowledge.get(n.key)).status for n in (a, b)] == [NoteStatus.ACCEPTED] * 2
    notifier = knowledge.notifier
    assert isinstance(notifier, RecordingNotifier)
    assert [n.kind for n in notifier.notices] == [NoticeKind.MERGE_SUGGESTED]


@pytest.mark.parametrize("order", ["project first", "company first"])
def test_a_merge_is_suggested_whichever_of_two_layers_is_accepted_first(knowledge: KnowledgeBase, order: str) -> None:
    text = "cache the schema lookups per request"
    project = asyncio.run(knowledge.add(_item(text, Layer.PROJECT, _chain("o1", "t1", "p1"), "project")))
    company = asyncio.run(knowledge.add(_item(text, Layer.COMPANY, _chain("o1", "t1", "p1"), "company")))
    elsewhere = asyncio.run(knowledge.add(_item(text, Layer.TEAM, _chain("o2", "t2", "p2"), "other team")))
    notes = [project, company] if order == "project first" else [company, project]
    for note in notes + [elsewhere]:
        asyncio.run(knowledge.transition(note.key, NoteStatus.PROPOSED))
        asyncio.run(knowledge.transition(note.key, NoteStatus.ACCEPTED))
    pairs = {(s.first_id, s.second_id) for s in asyncio.run(knowledge.merge_suggestions())}
    assert pairs == {tuple(sorted((project.key, company.key))), tuple(sorted((company.key, elsewhere.key)))}


def test_accepting_a_note_without_an_org_after_an_org_note_commits_and_compares_only_its_chain(
    knowledge: KnowledgeBase,
) -> None:
    """A chain with no org cannot see an org note, so the two are never a merge pair, and
    accepting it neither raises nor skips the merge pass for the notes it can see."""
    text = "cache the schema lookups per request"
    org_note = asyncio.run(knowledge.add(_item(text, Layer.ORG, _chain("o1", "t1", "p1"), "org")))
    no_org = LayerIds("default", project_id="p1")
    company = asyncio.run(knowledge.add(_item(text, Layer.COMPANY, no_org, "company")))
    project = asyncio.run(knowledge.add(_item(text, Layer.PROJECT, no_org, "project without an org")))
    for note in (org_note, company, project):
        asyncio.run(knowledge.transition(note.key, NoteStatus.PROPOSED))
        assert asyncio.run(knowledge.transition(note.key, NoteStatus.ACCEPTED)).status is NoteStatus.ACCEPTED
    pairs = {(s.first_id, s.second_id) for s in asyncio.run(knowledge.merge_suggestions())}
    assert pairs == {tuple(sorted((org_note.key, company.key))), tuple(sorted((company.key, project.key)))}


# -- I11 -----------------------------------------------------------------------------------

chains = st.builds(_chain, st.sampled_from(ORGS), st.sampled_from(TEAMS), st.sampled_from(PROJECTS))
layers = st.sampled_from(list(Layer))
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)


@pytest.fixture(scope="module")
def population() -> Iterator[KnowledgeBase]:
    """Notes of every layer in every tenant chain of ORGS x TEAMS x PROJECTS."""
    with tempfile.TemporaryDirectory() as directory:
        stores = open_stores(directory, embedder=EMBEDDER)
        repository = stores.knowledge
        knowledge = KnowledgeBase(repository, EMBEDDER, clock=FakeClock())
        words = itertools.cycle(itertools.permutations(WORDS, 3))
        for org, team, project in itertools.product(ORGS, TEAMS, PROJECTS):
            for layer in Layer:
                for _ in range(3):
                    asyncio.run(knowledge.add(_item(" ".join(next(words)), layer, _chain(org, team, project))))
        yield knowledge
        stores.close()


@settings(deadline=None, max_examples=150)
@given(caller=chains, layer=layers, query=texts, k=st.integers(1, 20))
def test_retrieval_never_leaves_the_callers_chain(population: KnowledgeBase, caller: LayerIds, layer: Layer, query: str, k: int) -> None:
    """I11: whatever the query, layer and k, every result is of the requested layer or a
    parent and belongs to the caller's own org/team/project chain."""
    found = asyncio.run(population.retrieve(query, caller, layer=layer, k=k, min_similarity=0.0, session=Scope(session_id="prop")))
    assert len(found) <= k
    for result in found:
        item = result.item
        assert item.layer.depth <= layer.depth
        assert all(item.layer_ids.id_at(each) == caller.id_at(each) for each in item.layer.with_parents())
    scores = [round(r.score, 6) for r in found]
    assert scores == sorted(scores, reverse=True)


def _visible(caller: LayerIds, note: KnowledgeItem) -> bool:
    """The I11 rule restated as the test's oracle: the note's ids equal the caller's at
    the note's layer and every parent."""
    return all(note.layer_ids.id_at(each) == caller.id_at(each) for each in note.layer.with_parents())


@settings(deadline=None, max_examples=25)
@given(
    notes=st.lists(st.tuples(texts, layers, chains), min_size=1, max_size=12),
    caller=chains,
    query=texts,
)
def test_isolation_holds_for_any_population(notes: list[tuple[str, Layer, LayerIds]], caller: LayerIds, query: str) -> None:
    """I11: for any set of stored notes, a search returns exactly the visible ones at most."""
    with tempfile.TemporaryDirectory() as directory:
        stores = open_stores(directory, embedder=EMBEDDER)
        repository = stores.knowledge
        knowledge = KnowledgeBase(repository, EMBEDDER, clock=FakeClock())
        stored = [asyncio.run(knowledge.add(_item(text, layer, owner))) for text, layer, owner in notes]
        visible = {n.key for n in stored if _visible(caller, n)}
        found = {r.item.key for r in asyncio.run(knowledge.search(query, caller, k=len(stored), min_similarity=-1.0))}
        stores.close()
    assert found == visible


# -- lifecycle and quality counters (I10) ------------------------------------------------


class LifecycleMachine(RuleBasedStateMachine):
    """After every step: a note is flagged exactly when the flag rule holds, no draft
    satisfies the auto-propose rule, statuses follow the lifecycle, counters equal what
    was observed, and stored content is never modified (I10)."""

    notes = Bundle("notes")

    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.TemporaryDirectory()
        self.stores = open_stores(self._dir.name, embedder=EMBEDDER)
        self.repository = self.stores.knowledge
        self.notifier = RecordingNotifier()
        self.knowledge = KnowledgeBase(self.repository, EMBEDDER, notifier=self.notifier, clock=FakeClock())
        self.rules = QualityRules()
        self.owner = _chain("o1", "t1", "p1")
        self.originals: dict[int, KnowledgeItem] = {}
        self.status: dict[int, NoteStatus] = {}
        self.retrieved: dict[int, int] = {}
        self.seen: dict[str, set[int]] = {}
        self.turns: dict[str, list[set[int]]] = {}
        """Per session, the notes each of its turns was shown, in turn order."""
        self.credited: dict[int, set[str]] = {}
        self.texts = iter(itertools.permutations(WORDS, 4))

    @initialize(target=notes)
    def first(self) -> int:
        return self.add()

    @rule(target=notes)
    def add(self) -> int:
        item = asyncio.run(self.knowledge.add(_item(" ".join(next(self.texts)), Layer.PROJECT, self.owner)))
        self.originals[item.key] = item
        self.status[item.key] = NoteStatus.DRAFT
        self.retrieved[item.key] = 0
        self.credited[item.key] = set()
        return item.key

    sessions = Bundle("sessions")

    def _retrieve(self, note: int, session: str) -> None:
        retrievable = self.status[note] in RETRIEVABLE
        turns = self.turns.setdefault(session, [])
        found = asyncio.run(self.knowledge.retrieve(
            self.originals[note].markdown, self.owner, session=Scope(session_id=session), turn_id=f"turn-{len(turns)}",
            k=1, min_similarity=0.99,
        ))
        turns.append({result.item.key for result in found})
        for result in found:
            self.retrieved[result.item.key] += 1
            self.seen.setdefault(session, set()).add(result.item.key)
            self._maybe_proposed(result.item.key)
        assert [r.item.key for r in found] == ([note] if retrievable else [])

    @rule(target=sessions, note=notes, times=st.integers(1, 3), liked=st.booleans())
    def use(self, note: int, times: int, liked: bool) -> str:
        """A new session is shown the note and the user may like the outcome."""
        session = f"s{len(self.seen)}"
        self.seen[session] = set()
        for _ in range(times):
            self._retrieve(note, session)
        if liked:
            self._like(session)
        return session

    @rule(note=notes, count=st.integers(1, 7))
    def popular(self, note: int, count: int) -> None:
        """Several new sessions are each shown the note once, and every user likes it."""
        for _ in range(count):
            self.use(note, 1, True)

    @rule(note=notes, times=st.integers(1, 12))
    def browse(self, note: int, times: int) -> None:
        """Retrievals nobody gives feedback on."""
        for _ in range(times):
            self._retrieve(note, "browsing")

    @rule(session=sessions, positive=st.booleans())
    def feedback_again(self, session: str, positive: bool) -> None:
        if positive:
            self._like(session)
        else:
            assert asyncio.run(self.knowledge.record_feedback(Scope(session_id=session), positive=False)) == []

    @rule(session=sessions, turn=st.integers(0, 2))
    def like_one_answer(self, session: str, turn: int) -> None:
        """Feedback on one turn credits what that turn was shown, each note once per session."""
        shown = self.turns[session]
        credited = asyncio.run(
            self.knowledge.record_feedback(Scope(session_id=session), positive=True, turn_id=f"turn-{turn}")
        )
        expected = shown[turn] if turn < len(shown) else set()
        assert {item.key for item in credited} == {key for key in expected if session not in self.credited[key]}
        for key in expected:
            self.credited[key].add(session)
            self._maybe_proposed(key)

    def _like(self, session: str) -> None:
        asyncio.run(self.knowledge.record_feedback(Scope(session_id=session), positive=True))
        for key in self.seen.get(session, ()):
            self.credited[key].add(session)
            self._maybe_proposed(key)

    @rule(note=notes, status=st.sampled_from(list(NoteStatus)))
    def transition(self, note: int, status: NoteStatus) -> None:
        if status in TRANSITIONS[self.status[note]]:
            assert asyncio.run(self.knowledge.transition(note, status)).status is status
            self.status[note] = status
        else:
            with pytest.raises(InvalidNoteTransitionError):
                asyncio.run(self.knowledge.transition(note, status))

    @rule(note=notes)
    def reference(self, note: int) -> None:
        before = asyncio.run(self.repository.get(note)).reference_count
        assert asyncio.run(self.knowledge.add_reference(note)).reference_count == before + 1

    def _maybe_proposed(self, key: int) -> None:
        retrieved, useful = self.retrieved[key], len(self.credited[key])
        ratio = useful / retrieved if retrieved else 0.0
        if self.status[key] is NoteStatus.DRAFT and retrieved > 5 and ratio > 0.8:
            self.status[key] = NoteStatus.PROPOSED

    @invariant()
    def rules_hold_and_content_is_untouched(self) -> None:
        for key, original in self.originals.items():
            item = asyncio.run(self.repository.get(key))
            assert item.flagged_for_review == self.rules.should_flag(item)
            assert not self.rules.should_propose(item)
            assert item.status is self.status[key]
            assert item.retrieval_count == self.retrieved[key]
            assert item.usefulness_score == len(self.credited[key])
            assert (item.title, item.markdown, item.metadata, item.layer, item.layer_ids, item.created_at) == (
                original.title, original.markdown, original.metadata, original.layer, original.layer_ids, original.created_at,
            )
            assert np.array_equal(item.embedding, original.embedding)
        for notice in self.notifier.notices:
            event(f"maintainers were told: {notice.kind.value}")

    def teardown(self) -> None:
        self.stores.close()
        self._dir.cleanup()


TestLifecycleMachine = LifecycleMachine.TestCase
TestLifecycleMachine.settings = settings(deadline=None, max_examples=60, stateful_step_count=30)


class _IdentifierBlindEmbedder:
    """Word hashing of a text without its identifiers, so near-identical notes embed alike
    and only the keyword side can tell them apart, as with any semantic embedder."""

    name = "identifier-blind-v1/384"
    dim = EMBEDDER.dim

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return EMBEDDER.embed([" ".join(w for w in t.split() if not any(c.isdigit() for c in w)) for t in texts])

    async def aembed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.embed(texts)


@pytest.mark.parametrize("keyword_weight", [HybridWeights().keyword, 0.0])
def test_search_fuses_the_keyword_side_so_a_quoted_identifier_finds_its_note_among_near_identical_ones(
    tmp_path: Path, keyword_weight: float
) -> None:
    embedder = _IdentifierBlindEmbedder()
    stores = open_stores(tmp_path, embedder=embedder)
    try:
        settings = RetrievalSettings(hybrid=attrs.evolve(HybridWeights(), keyword=keyword_weight))
        knowledge = KnowledgeBase(stores.knowledge, embedder, clock=FakeClock(), settings=settings)
        owner = _chain("o1", "t1", "p1")
        texts = [f"order ORD-{48200 + i} failed at checkout: refund it and tell the customer" for i in range(12)]
        for text in texts:
            asyncio.run(knowledge.add(KnowledgeItem(
                NoteType.PATTERN, Layer.PROJECT, owner, text, text, embedder.embed([text])[0], datetime(2026, 1, 1, tzinfo=UTC),
            )))
        found = asyncio.run(knowledge.search("what happened to ORD-48211 at checkout?", owner, k=3))
        assert found and all(f.item.markdown in texts for f in found)
        assert (found[0].item.markdown == texts[11]) is (keyword_weight > 0)
    finally:
        stores.close()
