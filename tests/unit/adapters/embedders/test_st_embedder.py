"""SentenceTransformerEmbedder on a tiny model built here (random weights, a 13-word vocabulary):
nothing is downloaded, so only the mechanics are tested, never how well it retrieves."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path

import numpy as np
import pytest

from agentloop.adapters import HashingEmbedder, open_stores, reembed_stores
from agentloop.adapters.embedders.sentence_transformers import SentenceTransformerEmbedder
from agentloop.adapters.errors import EmbedderMismatchError
from agentloop.ports import Embedder
from agentloop.scopes import Scope

WORDS = "the shop opens at nine deploy every night invoices are sent monthly".split()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sentence-transformers model (a one-layer BERT with hidden size 16, mean pooling)
    saved to a directory, as `SentenceTransformer.save` writes it."""
    with warnings.catch_warnings():
        # sentence_transformers.models and its method names moved in 5.x; 3.x has only these
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        return _build(tmp_path_factory.mktemp("st"))


def _build(root: Path) -> Path:
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel, BertTokenizerFast

    (root / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=5 + len(WORDS), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(root / "bert")
    BertTokenizerFast(vocab_file=str(root / "vocab.txt")).save_pretrained(root / "bert")
    word = models.Transformer(str(root / "bert"))
    pooling = models.Pooling(word.get_word_embedding_dimension(), "mean")
    SentenceTransformer(modules=[word, pooling], device="cpu").save(str(root / "tiny"))
    return root / "tiny"


def test_a_model_directory_embeds_in_batches_normalised_rows_named_by_the_directory(tiny_model: Path) -> None:
    embedder = SentenceTransformerEmbedder(tiny_model, batch_size=2)
    texts = ["the shop opens at nine", "deploy every night", "invoices are sent monthly", "the shop opens at nine", ""]
    vectors = embedder.embed(texts)
    assert isinstance(embedder, Embedder) and embedder.name == "st:tiny/16" and embedder.dim == 16
    assert vectors.dtype == np.float32 and vectors.shape == (5, 16)
    assert np.allclose(np.linalg.norm(vectors[:4], axis=1), 1.0)
    assert np.allclose(vectors[0], vectors[3], atol=1e-6), "a text embeds the same whichever batch it is in"
    assert np.allclose(SentenceTransformerEmbedder(tiny_model, batch_size=32).embed(texts), vectors, atol=1e-5)
    assert np.allclose(asyncio.run(embedder.aembed(texts[:2])), vectors[:2], atol=1e-6)
    assert embedder.embed([]).shape == (0, 16)


def test_a_model_that_is_neither_a_directory_nor_in_the_cache_is_named_in_the_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no sentence-transformers model at .*nowhere") as caught:
        SentenceTransformerEmbedder(tmp_path / "nowhere")
    assert "\n" not in str(caught.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no sentence-transformers model at .*empty") as empty:
        SentenceTransformerEmbedder(tmp_path / "empty")
    assert "\n" not in str(empty.value)


def test_stores_built_with_the_model_refuse_another_embedder_until_reembedded(tiny_model: Path, tmp_path: Path) -> None:
    scope = Scope(project_id="shop")
    model = SentenceTransformerEmbedder(tiny_model)
    with open_stores(tmp_path, embedder=model) as stores:
        asyncio.run(stores.rag.add(scope, "the shop opens at nine"))
        asyncio.run(stores.rag.add(scope, "invoices are sent monthly"))
        (hit,) = asyncio.run(stores.rag.search(scope, "the shop opens at nine", 1))
        assert hit.text == "the shop opens at nine" and hit.score == pytest.approx(1.0, abs=1e-4)
    with pytest.raises(EmbedderMismatchError, match="embedded by 'st:tiny/16', but it is opened with the embedder 'hashing-v1/16'"):
        open_stores(tmp_path, embedder=HashingEmbedder(dim=16))
    reembed_stores(tmp_path, embedder=HashingEmbedder(dim=16))
    with open_stores(tmp_path, embedder=HashingEmbedder(dim=16)) as stores:
        assert [h.text for h in asyncio.run(stores.rag.search(scope, "invoices sent", 1))] == ["invoices are sent monthly"]
