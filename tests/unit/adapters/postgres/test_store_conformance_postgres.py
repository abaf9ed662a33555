"""The store conformance suite (`agentloop.testing.stores`) run against the PostgreSQL
backend, on the test run's PostgreSQL server: the backend gives nothing but its fixture."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentloop.adapters import HashingEmbedder, Stores, open_stores
from agentloop.testing.stores import StoresTests


class TestPostgresStores(StoresTests):
    @pytest.fixture
    def open_backend(self, postgres_url: str) -> Callable[..., Stores]:
        return lambda embedder=None: open_stores(postgres_url, embedder=embedder or HashingEmbedder(dim=64))
