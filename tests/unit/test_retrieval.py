"""Reciprocal rank fusion and the query words every keyword index is asked for."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import re

from agentloop.retrieval import MAX_QUERY_WORDS, HybridWeights, fuse, query_words


def test_fusion_adds_each_sides_weighted_reciprocal_rank() -> None:
    vector, keyword = [("a", 0.9), ("b", 0.8)], [("b", 7.0), ("c", 3.0)]
    fused = dict(fuse(vector, keyword, HybridWeights(vector=1.0, keyword=2.0, rrf_k=60)))
    assert fused == pytest.approx({"a": 1 / 61, "b": 1 / 62 + 2 / 61, "c": 2 / 62})
    assert [id_ for id_, _ in fuse(vector, keyword, HybridWeights())] == ["b", "a", "c"]


def test_texts_a_side_scores_alike_share_its_rank() -> None:
    fused = dict(fuse([("a", 0.5), ("b", 0.5), ("c", 0.1)], [("b", 2.0), ("a", 2.0)], HybridWeights(keyword=1.0)))
    assert fused["a"] == fused["b"] == pytest.approx(2 / 61) and fused["c"] == pytest.approx(1 / 63)


def test_equal_scores_keep_the_vector_sides_order_and_a_zero_weight_ranks_by_the_other_side() -> None:
    assert [id_ for id_, _ in fuse([("a", 0.3)], [("b", 1.0)], HybridWeights(keyword=1.0))] == ["a", "b"]
    assert [id_ for id_, _ in fuse([("a", 0.9), ("b", 0.3)], [("b", 1.0)], HybridWeights(vector=0.0))] == ["b", "a"]


def test_by_default_the_text_only_the_keyword_side_ranks_first_beats_the_one_only_the_vector_side_does() -> None:
    """The note quoting an asked identifier, beyond the vector side's candidates, no longer ties and loses."""
    assert [id_ for id_, _ in fuse([("near", 0.9)], [("quoted", 5.0)], HybridWeights())] == ["quoted", "near"]


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


def _each_word_checked(text: str) -> list[str]:
    """query_words as its docstring reads, word by word, without the whole-text check first."""
    words: dict[str, str] = {}
    for raw in text.split():
        word = raw.replace("\x00", "").strip("\"'()[]{}<>,;:!?.`")
        if re.search(r"[^\W_]", word) and re.search(r"\d|[^\W_][-._:/@#][^\W_]|.[A-Z]", word):
            words.setdefault(word.casefold(), word)
    return list(words.values())[:MAX_QUERY_WORDS]


@given(st.text(alphabet=st.sampled_from("aZ1-._:/@# \x00\n(?!é_Ω")) | st.text())
def test_query_words_skipping_a_text_without_identifiers_finds_what_checking_each_word_finds(text: str) -> None:
    assert query_words(text) == _each_word_checked(text)


def _fused_and_sorted(
    vector: list[tuple[int, float]], keyword: list[tuple[int, float]], weights: HybridWeights
) -> list[tuple[int, float]]:
    """Reciprocal rank fusion as its docstring reads: every id's summed score, sorted best first, ties in first-seen order."""
    scores: dict[int, float] = {}
    for ranking, weight in ((vector, weights.vector), (keyword, weights.keyword)):
        rank, previous = 0, None
        for position, (id_, score) in enumerate(ranking, 1):
            if round(score, 9) != previous:
                rank, previous = position, round(score, 9)
            scores[id_] = scores.get(id_, 0.0) + weight / (weights.rrf_k + rank)
    return sorted(scores.items(), key=lambda scored: -scored[1])


_RANKING = st.lists(st.tuples(st.integers(0, 30), st.sampled_from([0.1, 0.5, 0.5000000001, 0.9, 2.0])), max_size=12)


@given(_RANKING, _RANKING, st.sampled_from([0.0, 1.0, 2.0]), st.sampled_from([0.0, 1.0]))
def test_fusing_one_side_or_both_gives_the_fused_scores_sorted(
    vector: list[tuple[int, float]], keyword: list[tuple[int, float]], vector_weight: float, keyword_weight: float
) -> None:
    """The shortcut for one side (its order kept) answers what sorting the fused scores answers."""
    vector.sort(key=lambda hit: -hit[1])
    keyword.sort(key=lambda hit: -hit[1])
    weights = HybridWeights(vector=vector_weight, keyword=keyword_weight)
    for sides in ((vector, keyword), (vector, []), ([], keyword)):
        assert fuse(*sides, weights) == _fused_and_sorted(*sides, weights)
