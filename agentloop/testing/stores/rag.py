"""The RAG store suite: hybrid search within a scope, dedup, tenant isolation, reopening, concurrent adds."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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

    def test_an_exact_identifier_among_near_identical_texts_ranks_first(self, stores: Stores) -> None:
        families = (
            ("Order ORD-482{n:02d} was delayed at the Lyon warehouse", "what went wrong with order ORD-48217?"),
            ("The disk of db-{n:02d}.eu-west.internal filled up overnight", "is db-17.eu-west.internal healthy again"),
            ("Checkout failed with error E10{n:02d} after the payment step", "customers see E1017 at checkout"),
        )
        for template, _ in families:
            for n in range(10, 30):
                run(stores.rag.add(self.A, template.format(n=n)))
        for template, question in families:
            (best, *_) = run(stores.rag.search(self.A, question, 3))
            assert best.text == template.format(n=17), question

    def test_a_text_holding_a_word_of_the_query_is_found_even_when_vectors_rank_it_low(self, stores: Stores) -> None:
        """The keyword side offers a text the nearest texts crowd out (none of theirs holds a word of the query whole)."""
        decoys = [f"restart gateway pool {n} during maintenance" for n in range(25)]
        target = "Ticket zq-7731 was closed by the night shift"
        for text in [*decoys, target]:
            run(stores.rag.add(self.A, text))
        query = "restarting gateways pooling maintenances zq-7731 durings"
        vectors = stores.embedder.embed([query, target, *decoys])
        similarities = vectors[1:] @ vectors[0]
        assert int(np.sum(similarities[1:] > similarities[0])) >= 20, "the vectors alone rank the target below the decoys"
        assert target in [hit.text for hit in run(stores.rag.search(self.A, query, 3))]

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors])
    @given(st.text(max_size=40))
    def test_any_query_text_searches_without_error_and_never_crosses_chains(self, stores: Stores, query: str) -> None:
        """I11: whatever the query holds (operators, quotes, identifiers, no words), the keyword
        side stays inside the scope: a namesake chain finds nothing of this chain's texts."""
        mine = {run(stores.rag.add(CHAIN, text)) for text in ("Ticket ORD-1 \"quoted\" AND NOT x*", "near(a b) OR c:d")}
        for other in namesakes(CHAIN):
            assert run(stores.rag.search(other, query, 5)) == []
        assert {hit.id for hit in run(stores.rag.search(CHAIN, query, 5))} <= mine
        assert {hit.id for hit in run(stores.rag.search(CHAIN, "ORD-1 near(a", 5))} == mine

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
