"""The store conformance suite (`agentloop.testing.stores`) run against the SQLite backend
and against a tiny in-memory backend that gives nothing but its fixture."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from memory_backend import MemoryData, open_memory_stores

from agentloop.adapters import HashingEmbedder, Stores, open_stores
from agentloop.testing.stores import StoresTests


class TestSqliteStores(StoresTests):
    @pytest.fixture
    def open_backend(self, tmp_path: Path) -> Callable[..., Stores]:
        return lambda embedder=None: open_stores(tmp_path, embedder=embedder or HashingEmbedder(dim=64))


class TestMemoryStores(StoresTests):
    @pytest.fixture
    def open_backend(self) -> Callable[..., Stores]:
        data = MemoryData()
        return lambda embedder=None: open_memory_stores(data, embedder=embedder)
