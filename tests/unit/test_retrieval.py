"""Reciprocal rank fusion and the query words every keyword index is asked for."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentloop.retrieval import MAX_QUERY_WORDS, HybridWeights, fuse, query_words


def test_fusion_adds_each_sides_weighted_reciprocal_rank() -> None:
    vector, keyword = [("a", 0.9), ("b", 0.8)], [("b", 7.0), ("c", 3.0)]
    fused = dict(fuse(vector, keyword, HybridWeights(vector=1.0, keyword=2.0, rrf_k=60)))
    assert fused == pytest.approx({"a": 1 / 61, "b": 1 / 62 + 2 / 61, "c": 2 / 62})
    assert [id_ for id_, _ in fuse(vector, keyword, HybridWeights())] == ["b", "a", "c"]


def test_texts_a_side_scores_alike_share_its_rank() -> None:
    fused = dict(fuse([("a", 0.5), ("b", 0.5), ("c", 0.1)], [("b", 2.0), ("a", 2.0)], HybridWeights()))
    assert fused["a"] == fused["b"] == pytest.approx(2 / 61) and fused["c"] == pytest.approx(1 / 63)


def test_equal_scores_keep_the_vector_sides_order_and_a_zero_weight_ranks_by_the_other_side() -> None:
    assert [id_ for id_, _ in fuse([("a", 0.3)], [("b", 1.0)], HybridWeights())] == ["a", "b"]
    assert [id_ for id_, _ in fuse([("a", 0.9), ("b", 0.3)], [("b", 1.0)], HybridWeights(vector=0.0))] == ["b", "a"]


def test_weights_refuse_negative_values_and_no_candidates() -> None:
    with pytest.raises(ValueError, match="keyword must be 0 or more"):
        HybridWeights(keyword=-1.0)
    with pytest.raises(ValueError):
        HybridWeights(candidates=0)
    assert HybridWeights(candidates=20).per_side(50) == 50


def test_query_words_keep_identifiers_whole_and_leave_plain_words_to_the_vectors() -> None:
    assert query_words('why "ORD-48213" on db-07.eu-west.internal?! Why -- E1042, e1042 PgBouncer NGINX pool_mode') == [
        "ORD-48213", "db-07.eu-west.internal", "E1042", "PgBouncer", "NGINX", "pool_mode"
    ]
    assert query_words("!!! -- *** How do I restart the service? Hello.") == []


@given(st.text())
def test_query_words_are_few_nonblank_and_free_of_nul(text: str) -> None:
    words = query_words(text)
    assert len(words) <= MAX_QUERY_WORDS and all(word.strip() and "\x00" not in word for word in words)
    assert len({word.casefold() for word in words}) == len(words)
