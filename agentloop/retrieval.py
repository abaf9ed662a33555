"""Hybrid retrieval shared by every backend: the words of a query a keyword index is asked
for, and reciprocal rank fusion of the vector and keyword rankings."""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from typing import TypeVar

import attrs

Id = TypeVar("Id", bound=Hashable)

_WORD = re.compile(r"\S+")
_ALPHANUMERIC = re.compile(r"[^\W_]")
_IDENTIFIER = re.compile(r"\d|[^\W_][-._:/@#][^\W_]|.[A-Z]")
"""What marks a word as an identifier: a digit, letters or digits joined by `-._:/@#`, or a
capital after its first letter (ORD-48213, db-07.eu-west.internal, E1042, PgBouncer, NGINX)."""
_MAYBE_IDENTIFIER = re.compile(r"\d|[^\W_][-._:/@#][^\W_]|\S[A-Z]")
"""`_IDENTIFIER` over a whole text: no match there (and no NUL), no word of it is an identifier."""
_EDGE = "\"'()[]{}<>,;:!?.`"
MAX_QUERY_WORDS = 32
"""Words of a query sent to the keyword index; a pasted page costs no more than a question."""


def _non_negative(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value >= 0:
        raise ValueError(f"HybridWeights.{attribute.name} must be 0 or more, got {value}")


@attrs.frozen
class HybridWeights:
    """How a search fuses its vector and keyword rankings (reciprocal rank fusion).

    A text at rank r (from 1) of a side scores `weight / (rrf_k + r)` there; the scores add
    up. Each side offers `candidates` texts (or the k asked for, if more). A `keyword`
    weight of 0 turns the keyword side off (vector search alone); a `vector` weight of 0
    keeps the vector side's texts but ranks by keywords first. The keyword side weighs a
    little more by default, so the text only it ranks first (the note quoting an asked
    identifier) beats the one only the vector side ranks first instead of tying with it.
    """

    vector: float = attrs.field(default=1.0, validator=_non_negative)
    keyword: float = attrs.field(default=1.01, validator=_non_negative)
    rrf_k: float = attrs.field(default=60.0, validator=_non_negative)
    candidates: int = attrs.field(default=20, validator=attrs.validators.ge(1))

    def per_side(self, k: int) -> int:
        """How many texts each side is asked for when `k` are wanted."""
        return max(k, self.candidates)


def fuse(
    vector: Sequence[tuple[Id, float]], keyword: Sequence[tuple[Id, float]], weights: HybridWeights
) -> list[tuple[Id, float]]:
    """Every id of either ranking ((id, score) pairs, best first) with its fused score, best
    first. Ids a side scores alike share its best rank among them, so texts it cannot tell
    apart stay tied; equal fused scores keep the vector side's order, then the keyword side's."""
    scores: dict[Id, float] = {}
    for ranking, weight in ((vector, weights.vector), (keyword, weights.keyword)):
        rank, previous = 0, None
        for position, (id_, score) in enumerate(ranking, 1):
            rounded = round(score, 9)
            if rounded != previous:
                rank, previous = position, rounded
            scores[id_] = scores.get(id_, 0.0) + weight / (weights.rrf_k + rank)
    if not (vector and keyword) and len(scores) == len(vector) + len(keyword):
        return list(scores.items())  # one side, each id once: its fused scores never rise, already best first
    order = {id_: position for position, id_ in enumerate(scores)}
    return sorted(scores.items(), key=lambda scored: (-scored[1], order[scored[0]]))


def query_words(text: str) -> list[str]:
    """The words of `text` a keyword index is asked for: its whitespace-separated words that
    look like identifiers (`_IDENTIFIER`), stripped of the quotes and punctuation around
    them, each once whatever its case, at most `MAX_QUERY_WORDS`.
    An identifier such as `db-07.eu-west.internal` stays one word; each backend quotes it for its
    own syntax. Plain words are left to the vectors, which weigh meaning better: sent to the
    keyword index, the common words of a paraphrased question pull up the wrong texts."""
    if "\x00" not in text and not _MAYBE_IDENTIFIER.search(text):
        return []
    words: dict[str, str] = {}
    for match in _WORD.finditer(text):
        word = match.group(0).replace("\x00", "").strip(_EDGE)
        if _ALPHANUMERIC.search(word) and _IDENTIFIER.search(word):
            words.setdefault(word.casefold(), word)
            if len(words) == MAX_QUERY_WORDS:
                break
    return list(words.values())
