"""The test run is offline as CI is: reaching past this machine fails at once, and embedding
with the default embedder, as a turn and every command do, never tries."""

from __future__ import annotations

import socket

import pytest

from agentloop.adapters import WordLlamaEmbedder, default_embedder


def test_a_connection_past_loopback_fails_at_once_naming_the_address() -> None:
    with pytest.raises(OSError, match=r"a test reached for \('192\.0\.2\.1', 443\): tests reach only this machine"):
        socket.create_connection(("192.0.2.1", 443), timeout=5)


def test_loopback_stays_reachable() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname(), timeout=5):
            pass


def test_the_default_embedder_embeds_under_the_guard() -> None:
    assert isinstance(default_embedder(), WordLlamaEmbedder)
    assert default_embedder().embed(["where is order ORD-48213?"]).shape == (1, 256)
