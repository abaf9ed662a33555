"""WordLlamaEmbedder, the default: read from the wordllama wheel with no network, semantic,
batch-consistent; and stores built by the hashing embedder keep opening with it until moved."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from structlog.testing import capture_logs

from agentloop.adapters import HashingEmbedder, Reembedded, WordLlamaEmbedder, default_embedder, open_stores, reembed_stores
from agentloop.adapters.embedders import wordllama
from agentloop.notes import KnowledgeItem, Layer, LayerIds, NoteType
from agentloop.ports.vectors import Embedder
from agentloop.scopes import Scope
from store_kit import AT

ROOT = Path(__file__).resolve().parents[4]
TEXTS = ["How do I restart the billing service after it crashes?", "ünïcode wörds and émojis 🚀", "", "x", "word " * 400]


def _no_network(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError(f"a network connection was attempted: {args!r}")


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """No socket may connect or resolve a name, the weights load afresh, and HOME (where
    wordllama's own loader would cache a download) is an empty directory: yields it."""
    for name in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, _no_network)
    monkeypatch.setattr(socket, "create_connection", _no_network)
    monkeypatch.setattr(socket, "getaddrinfo", _no_network)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(wordllama, "_MODELS", {})
    yield tmp_path


def test_the_weights_load_and_embed_with_no_network_and_nothing_downloaded(offline: Path) -> None:
    embedder = WordLlamaEmbedder()
    vectors = embedder.embed(TEXTS)
    assert asyncio.run(embedder.aembed(TEXTS)).tolist() == vectors.tolist()
    assert vectors.shape == (len(TEXTS), 256) and vectors.dtype == np.float32
    assert list(offline.iterdir()) == [], "nothing is cached under HOME"


def test_the_adapter_never_imports_the_wordllama_package_whose_loader_downloads() -> None:
    script = (
        "import logging, socket, sys\n"
        "def refuse(*a, **k): raise AssertionError('network')\n"
        "socket.socket.connect = refuse; socket.create_connection = refuse; socket.getaddrinfo = refuse\n"
        "from agentloop.adapters.embedders.wordllama import WordLlamaEmbedder\n"
        "WordLlamaEmbedder().embed(['the shop opens at nine'])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('wordllama', 'requests', 'torch')), logging.root.handlers)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[] []", "no wordllama, requests or torch module, and the root logger left alone"


def test_vectors_equal_wordllamas_own_normalised_embeddings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logging, "basicConfig", lambda **_: None)  # importing wordllama configures the root logger
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer
    from wordllama.inference import WordLlamaInference

    spec = importlib.util.find_spec("wordllama")
    assert spec is not None and spec.submodule_search_locations
    folder = Path(spec.submodule_search_locations[0])
    reference = WordLlamaInference(
        load_file(str(folder / wordllama._WEIGHTS))["embedding.weight"], Tokenizer.from_file(str(folder / wordllama._TOKENIZER))
    )
    texts = [text for text in TEXTS if text]  # wordllama divides the empty text's zero row by 0
    assert np.allclose(WordLlamaEmbedder().embed(texts), reference.embed(texts, norm=True), atol=1e-6)


def test_a_paraphrase_is_nearer_than_an_unrelated_text_and_nearer_than_hashing_makes_it() -> None:
    note = "How do I restart the billing service after it crashes?"
    paraphrase = "What is the way to bring the payment server back up when it has gone down?"
    unrelated = "The recipe needs two cups of flour and an egg."
    similarity: dict[str, tuple[float, float]] = {}
    for embedder in (WordLlamaEmbedder(), HashingEmbedder()):
        note_row, paraphrase_row, unrelated_row = embedder.embed([note, paraphrase, unrelated])
        similarity[embedder.name] = (float(note_row @ paraphrase_row), float(note_row @ unrelated_row))
    near, far = similarity["wordllama-v1/256"]
    assert near > far + 0.2
    assert near > similarity["hashing-v1/384"][0]


def test_a_batch_embeds_each_text_as_alone_normalised_and_the_empty_text_to_zero() -> None:
    embedder = WordLlamaEmbedder()
    batch = embedder.embed(TEXTS)
    singles = np.concatenate([embedder.embed([text]) for text in TEXTS])
    assert np.allclose(batch, singles, atol=1e-6)
    norms = np.linalg.norm(batch, axis=1)
    assert np.allclose(norms[[0, 1, 3, 4]], 1.0, atol=1e-5) and norms[2] == 0.0
    assert embedder.embed([]).shape == (0, 256)


@pytest.mark.parametrize("dim", wordllama.DIMENSIONS)
def test_the_name_and_dimension_say_which_vectors_and_a_shorter_one_is_their_start(dim: int) -> None:
    embedder = WordLlamaEmbedder(dim)
    assert isinstance(embedder, Embedder) and embedder.name == f"wordllama-v1/{dim}" and embedder.dim == dim
    full = WordLlamaEmbedder().embed(["The shop opens at nine"])[0]
    cut = full[:dim] / np.linalg.norm(full[:dim])
    assert np.allclose(embedder.embed(["The shop opens at nine"])[0], cut, atol=1e-6)


def test_a_dimension_the_weights_do_not_have_is_refused_with_the_ones_they_do() -> None:
    with pytest.raises(ValueError, match=r"dim in \(64, 128, 256\), got 300"):
        WordLlamaEmbedder(300)


def test_every_instance_of_a_dimension_shares_the_weights_loaded_once() -> None:
    WordLlamaEmbedder(128).load()
    loaded = wordllama._MODELS[128]
    WordLlamaEmbedder(128).embed(["again"])
    assert wordllama._MODELS[128] is loaded


def check_hashing_stores_keep_opening_until_reembedded(url: str) -> None:
    """Stores built by hashing-v1 open with it when no embedder is given, logging how to move;
    `reembed_stores` with the default moves them, and new stores get the default."""
    scope, note = Scope(user_id="ada"), "Restart the billing service with make restart-billing."
    with open_stores(url, embedder=HashingEmbedder()) as stores:
        asyncio.run(stores.rag.add(scope, "The shop opens at nine."))
        asyncio.run(stores.knowledge.add(
            KnowledgeItem(NoteType.PATTERN, Layer.COMPANY, LayerIds("default"), "billing", note, stores.embedder.embed([note])[0], AT)
        ))
    with capture_logs() as logs, open_stores(url) as stores:
        assert stores.embedder.name == "hashing-v1/384"
    (notice,) = [log for log in logs if log["event"] == "stores.hashing_embedder"]
    assert notice["log_level"] == "warning" and notice["default"] == "wordllama-v1/256"
    assert notice["move"].startswith("agentloop stores reembed ") and notice["move"].endswith(" --bot bot")
    assert reembed_stores(url, embedder=default_embedder()) == Reembedded(texts=1, notes=1)
    with capture_logs() as logs, open_stores(url) as stores:
        assert stores.embedder.name == "wordllama-v1/256"
        hits = asyncio.run(stores.rag.search(scope, "at what hour does the store open", 1))
        assert [hit.text for hit in hits] == ["The shop opens at nine."]
    assert [log for log in logs if log["event"] == "stores.hashing_embedder"] == []
    with open_stores(url, bot="fresh") as stores:
        assert stores.embedder.name == "wordllama-v1/256"


def test_old_hashing_sqlite_stores_keep_opening_with_it_until_reembedded(tmp_path: Path) -> None:
    check_hashing_stores_keep_opening_until_reembedded(f"sqlite:///{tmp_path}")


def test_old_hashing_postgres_stores_keep_opening_with_it_until_reembedded(postgres_url: str) -> None:
    check_hashing_stores_keep_opening_until_reembedded(postgres_url)


def test_a_single_text_embedded_again_gives_the_same_row_as_a_new_array() -> None:
    embedder = WordLlamaEmbedder()
    first = embedder.embed(["restart the payment service"])
    first[0, 0] = 42.0  # the caller's own array
    again = embedder.embed(["restart the payment service"])
    assert again[0, 0] != 42.0
    assert np.array_equal(again, embedder.embed(["restart the payment service", "x"])[:1])
