"""HashingEmbedder: deterministic, normalised, and similar for texts that share words."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop.adapters.embedders.hashing import HashingEmbedder
from agentloop.ports.vectors import Embedder

ROOT = Path(__file__).resolve().parents[4]
TEXTS = ["The deploy failed: database migration timed out", "ünïcode wörds and émojis 🚀", ""]


def _embed_in_subprocess(hash_seed: str) -> bytes:
    script = (
        "import sys\n"
        "from agentloop.adapters.embedders.hashing import HashingEmbedder\n"
        f"sys.stdout.buffer.write(HashingEmbedder().embed({TEXTS!r}).tobytes())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": hash_seed}
    return subprocess.run([sys.executable, "-c", script], env=env, check=True, capture_output=True).stdout


def test_vectors_are_identical_across_processes_with_different_hash_seeds() -> None:
    first = _embed_in_subprocess("1")
    second = _embed_in_subprocess("2")
    assert first == second
    here = HashingEmbedder().embed(TEXTS)
    assert np.frombuffer(first, dtype=np.float32).reshape(here.shape).tolist() == here.tolist()


def test_it_satisfies_the_embedder_port() -> None:
    embedder = HashingEmbedder(dim=64)
    assert isinstance(embedder, Embedder)
    assert embedder.dim == 64


@settings(deadline=None, max_examples=60)
@given(st.lists(st.text(max_size=80), max_size=8), st.integers(min_value=2, max_value=512))
def test_rows_are_float32_unit_length_or_zero(texts: list[str], dim: int) -> None:
    """Every row is L2-normalised or zero: a text without word characters is the zero row, and so,
    rarely, is one whose words' signed hashes cancel out (two words in one bucket, opposite signs)."""
    vectors = HashingEmbedder(dim=dim).embed(texts)
    assert vectors.dtype == np.float32
    assert vectors.shape == (len(texts), dim)
    for text, row in zip(texts, vectors):
        norm = float(np.linalg.norm(row))
        if any(ch.isalnum() or ch == "_" for ch in text):
            assert norm == pytest.approx(1.0, abs=1e-5) or norm == 0.0
        else:
            assert norm == 0.0


def test_empty_input_and_empty_text() -> None:
    embedder = HashingEmbedder(dim=32)
    assert embedder.embed([]).shape == (0, 32)
    assert not embedder.embed([""]).any()


def test_related_texts_score_higher_than_unrelated_ones() -> None:
    query, related, stemmed, unrelated = HashingEmbedder().embed(
        [
            "the payment service keeps timing out",
            "payment service timing out again",
            "payments services timed out",
            "bake sourdough bread at two hundred degrees",
        ]
    )
    assert float(query @ related) > 0.5
    assert float(query @ stemmed) > float(query @ unrelated) + 0.15
    assert abs(float(query @ unrelated)) < 0.15


def test_unrelated_texts_are_near_orthogonal_on_average() -> None:
    rng = np.random.default_rng(7)
    words = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=7)) for _ in range(400)]
    texts = [" ".join(words[i * 8 : i * 8 + 8]) for i in range(50)]
    vectors = HashingEmbedder().embed(texts)
    similarities = vectors @ vectors.T
    off_diagonal = similarities[~np.eye(len(texts), dtype=bool)]
    assert abs(float(off_diagonal.mean())) < 0.05
    assert float(np.abs(off_diagonal).max()) < 0.4


def test_case_and_punctuation_do_not_change_the_vector() -> None:
    a, b = HashingEmbedder().embed(["Hello, World!", "hello world"])
    assert a.tolist() == b.tolist()


def test_a_different_seed_gives_different_vectors() -> None:
    a = HashingEmbedder(seed=0).embed(["same text"])
    b = HashingEmbedder(seed=1).embed(["same text"])
    assert a.tolist() != b.tolist()


@pytest.mark.parametrize(("dim", "ngram"), [(1, 3), (16, 0)])
def test_invalid_parameters_are_refused(dim: int, ngram: int) -> None:
    with pytest.raises(ValueError, match="HashingEmbedder needs"):
        HashingEmbedder(dim=dim, char_ngram=ngram)


def test_the_name_says_the_dimension_and_any_setting_that_changes_the_vectors() -> None:
    """Stores record the name and refuse another, so vectors that differ must have names that differ."""
    assert HashingEmbedder().name == "hashing-v1/384" and HashingEmbedder(dim=64).name == "hashing-v1/64"
    assert HashingEmbedder(dim=64, seed=1).name == "hashing-v1/64;n=3;w=1.0;b=0.7;c=0.4;seed=1"
    assert len({HashingEmbedder(dim=64, **setting).name for setting in (
        {}, {"char_ngram": 4}, {"word_weight": 2.0}, {"bigram_weight": 0.0}, {"char_weight": 0.1}, {"seed": 7},
    )}) == 6
    assert asyncio.run(HashingEmbedder(dim=64).aembed(["same text"])).tolist() == HashingEmbedder(dim=64).embed(["same text"]).tolist()


@settings(max_examples=30, deadline=None)
@given(texts=st.lists(st.text(max_size=60), min_size=2, max_size=5))
def test_a_text_embedded_alone_is_its_row_of_a_batch(texts: list[str]) -> None:
    embedder = HashingEmbedder(dim=64)
    batch = embedder.embed(texts)
    for row, text in zip(batch, texts):
        assert np.array_equal(embedder.embed([text])[0], row)
        assert np.array_equal(embedder.embed([text])[0], row), "the second embedding of a text is the first one"


def test_a_text_embedded_again_is_not_hashed_again_and_the_callers_copy_is_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import zlib

    import agentloop.adapters.embedders.hashing as module

    embedder = HashingEmbedder()
    question = "What time does the office open on Mondays?"
    first = embedder.embed([question])
    hashed: list[bytes] = []

    class CountingZlib:
        @staticmethod
        def crc32(data: bytes, seed: int = 0) -> int:
            hashed.append(data)
            return zlib.crc32(data, seed)

    monkeypatch.setattr(module, "zlib", CountingZlib)
    first[0, :] = 0.0
    again = embedder.embed([question])
    assert hashed == []
    assert np.isclose(np.linalg.norm(again[0]), 1.0), "changing a returned row does not change the next embedding"
