"""The test run is offline as CI is: reaching past this machine or looking up a name fails at
once, in the tests and in the Python processes they start, and embedding with the default
embedder, as a turn and every command do, never tries."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from agentloop.adapters import WordLlamaEmbedder, default_embedder


def test_a_connection_past_loopback_fails_at_once_naming_the_address() -> None:
    with pytest.raises(OSError, match=r"a test reached for \('192\.0\.2\.1', 443\): tests reach only this machine"):
        socket.create_connection(("192.0.2.1", 443), timeout=5)


def test_looking_up_a_name_past_this_machine_fails_at_once_naming_it() -> None:
    with pytest.raises(socket.gaierror, match=r"a test looked up 'example\.com': tests reach only this machine"):
        socket.getaddrinfo("example.com", 443)
    with pytest.raises(socket.gaierror, match=r"a test looked up 'example\.com'"):
        socket.create_connection(("example.com", 443), timeout=5)


def test_loopback_stays_reachable_by_address_and_by_name() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname(), timeout=5):
            pass
        with socket.create_connection(("localhost", server.getsockname()[1]), timeout=5):
            pass


@pytest.mark.parametrize(("address", "refusal"), [
    ("('192.0.2.1', 443)", "a test reached for ('192.0.2.1', 443): tests reach only this machine"),
    ("('example.com', 443)", "a test looked up 'example.com': tests reach only this machine"),
])
def test_a_python_process_a_test_starts_is_refused_the_network_too(address: str, refusal: str) -> None:
    """As the CLI, `agentloop demo` and `agentloop serve` helpers start theirs: this run's environment."""
    reach = f"import socket\ntry:\n    socket.create_connection({address}, timeout=5)\nexcept OSError as e:\n    print(e)"
    result = subprocess.run([sys.executable, "-c", reach], env=dict(os.environ), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert refusal in result.stdout


def test_the_default_embedder_embeds_under_the_guard() -> None:
    assert isinstance(default_embedder(), WordLlamaEmbedder)
    assert default_embedder().embed(["where is order ORD-48213?"]).shape == (1, 256)
