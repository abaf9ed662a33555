"""Checks the store tests of both backends share: the files a process holds open, moving stores to another embedder."""

from __future__ import annotations

import asyncio
import os
import typing
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from agentloop.adapters import HashingEmbedder, Reembedded, open_stores, reembed_stores
from agentloop.adapters.errors import EmbedderMismatchError
from agentloop.notes import KnowledgeItem, Layer, LayerIds, NoteType
from agentloop.ports import Vectors
from agentloop.scopes import Scope

AT = datetime(2026, 3, 1, tzinfo=UTC)


def open_descriptors(path: Path) -> list[str]:
    """The descriptors of this process that point at `path` (Linux /proc)."""
    target = os.path.realpath(path)
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                found.append(fd)
        except OSError:
            continue
    return found


class _FailingEmbedder(HashingEmbedder):
    """Embeds one batch, then fails as a model server that went away would."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.calls = 0

    def embed(self, texts: typing.Sequence[str]) -> Vectors:
        self.calls += 1
        if self.calls > 1:
            raise ConnectionError("the embedding server went away")
        return super().embed(texts)

    async def aembed(self, texts: typing.Sequence[str]) -> Vectors:
        return self.embed(texts)


def check_reembedding(url: str) -> None:
    """Stores moved to another embedder keep their texts and notes, search with the new
    vectors, open only with the new embedder; one that fails half-way changes nothing."""
    old, new = HashingEmbedder(dim=32), HashingEmbedder(dim=48)
    scope, note = Scope(user_id="ada"), "Deploy the shop with make deploy-shop."
    with open_stores(url, embedder=old) as stores:
        for text in ("Lunch is at noon.", "The shop opens at nine."):
            asyncio.run(stores.rag.add(scope, text))
        asyncio.run(stores.knowledge.add(
            KnowledgeItem(NoteType.PATTERN, Layer.COMPANY, LayerIds("default"), "deploys", note, old.embed([note])[0], AT)
        ))
    with pytest.raises(ConnectionError):
        reembed_stores(url, embedder=_FailingEmbedder(48), batch_size=1)
    open_stores(url, embedder=old).close()  # still the old embedder's, whole
    assert reembed_stores(url, embedder=new, batch_size=1) == Reembedded(texts=2, notes=1)
    with pytest.raises(EmbedderMismatchError):
        open_stores(url, embedder=old)
    with open_stores(url, embedder=new) as stores:
        assert asyncio.run(stores.rag.texts(scope)) == ["Lunch is at noon.", "The shop opens at nine."]
        assert [h.text for h in asyncio.run(stores.rag.search(scope, "when does the shop open", 1))] == ["The shop opens at nine."]
        (item,) = asyncio.run(stores.knowledge.items())
        assert item.markdown == note and np.allclose(item.embedding, new.embed([note])[0], atol=1e-6)
