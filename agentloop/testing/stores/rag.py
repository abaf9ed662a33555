"""The RAG store suite: similarity search within a scope, dedup, tenant isolation, reopening, concurrent adds."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentloop.ports.stores import Stores
from agentloop.scopes import Scope
from agentloop.testing.stores._kit import A, CHAIN, Backend, at_once, namesakes, run


class RagStoreTests(Backend):
    """`RagStore`: texts found by meaning within their scope; a text is stored once per scope."""

    A, B = Scope(project_id="a"), Scope(project_id="b")

    def fill(self, stores: Stores) -> None:
        for scope, text in (
            (self.A, "The deployment runs every night at two"),
            (self.A, "Invoices are sent on the first of the month"),
            (self.B, "The deployment of project b is manual"),
            (self.A, "Lunch is served at noon in the canteen"),
        ):
            run(stores.rag.add(scope, text, session_id="s1"))

    def test_search_finds_the_most_similar_texts_of_the_scope_best_first(self, stores: Stores) -> None:
        self.fill(stores)
        hits = run(stores.rag.search(self.A, "when does the deployment run", 2))
        assert len(hits) == 2 and hits[0].text == "The deployment runs every night at two"
        assert all(hit.scope == self.A for hit in hits) and hits[0].score >= hits[1].score
        (same,) = run(stores.rag.search(self.A, "The deployment runs every night at two", 1))
        assert same.text == "The deployment runs every night at two" and same.score == pytest.approx(1.0, abs=1e-3), (
            "a hit's score is its cosine similarity"
        )
        assert len(run(stores.rag.search(self.A, "deployment", 1))) == 1
        assert [h.text for h in run(stores.rag.search(self.B, "deployment", 5))] == ["The deployment of project b is manual"]
        assert run(stores.rag.search(Scope(project_id="c"), "deployment", 5)) == []
        assert run(stores.rag.search(self.A, "deployment", 0)) == []
        assert run(stores.rag.search(self.A, "!!!", 5)) == []  # no words: nothing is similar
        assert run(stores.rag.count()) == 4

    def test_texts_lists_a_scopes_texts_oldest_first(self, stores: Stores) -> None:
        self.fill(stores)
        assert run(stores.rag.texts(self.A)) == [
            "The deployment runs every night at two", "Invoices are sent on the first of the month",
            "Lunch is served at noon in the canteen",
        ]
        assert run(stores.rag.texts(self.B)) == ["The deployment of project b is manual"]
        assert run(stores.rag.texts(Scope(project_id="c"))) == []

    def test_a_text_already_in_its_scope_is_not_stored_twice(self, stores: Stores) -> None:
        first = run(stores.rag.add(Scope(user_id="a"), "I don't know."))
        assert run(stores.rag.add(Scope(user_id="a"), "I don't know.")) == first
        assert run(stores.rag.add(Scope(user_id="b"), "I don't know.")) != first
        assert run(stores.rag.count()) == 2
        assert [h.id for h in run(stores.rag.search(Scope(user_id="a"), "know", 5))] == [first]
        assert run(stores.rag.texts(Scope(user_id="a"))) == ["I don't know."]

    def test_no_namesake_in_another_chain_finds_the_text(self, stores: Stores) -> None:
        """I11: an answer indexed for one chain is never found from another that reuses its ids."""
        mine = run(stores.rag.add(CHAIN, "The shop opens at nine"))
        for other in namesakes(CHAIN):
            assert run(stores.rag.search(other, "when does the shop open", 5)) == []
            assert run(stores.rag.texts(other)) == []
        assert [h.id for h in run(stores.rag.search(CHAIN, "when does the shop open", 5))] == [mine]

    def test_texts_and_their_results_survive_a_reopen(self, stores: Stores, open_backend: Callable[[], Stores]) -> None:
        self.fill(stores)
        queries = ["deployment at night", "invoices", "canteen lunch"]
        before = [run(stores.rag.search(self.A, query, 3)) for query in queries]
        stores.close()
        with open_backend() as again:
            assert [run(again.rag.search(self.A, query, 3)) for query in queries] == before
            assert run(again.rag.count()) == 4

    def test_concurrent_adds_lose_nothing_and_store_a_repeated_text_once(self, stores: Stores) -> None:
        texts = [f"note number {n} about topic{n}" for n in range(16)]
        ids = at_once(lambda text: stores.rag.add(CHAIN, text), texts)
        assert len(set(ids)) == len(texts) and run(stores.rag.count()) == len(texts)
        same = at_once(lambda text: stores.rag.add(CHAIN, text), ["one answer given by many"] * 8)
        assert len(set(same)) == 1 and run(stores.rag.count()) == len(texts) + 1
        found = run(stores.rag.search(CHAIN, "note number 7 about topic7", 1))
        assert [(h.id, h.text) for h in found] == [(ids[7], texts[7])]
