"""A bot's database out of reach, as serve answers it: 503 with Retry-After, and /readyz red while /healthz stays green."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import agentloop.bots
import agentloop.serve.server
from agentloop.adapters import Stores
from agentloop.errors import StoreUnavailableError
from serve_kit import ALICE, auth, client, new_session, settings


async def _unreachable(*args: Any, **kwargs: Any) -> Any:
    raise StoreUnavailableError("the stores at test", "the server is restarting", retry_after=7)


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Stores]:
    """The stores the server opens, as it opens them (so a test can make their reads fail)."""
    seen: list[Stores] = []
    real = agentloop.serve.server.open_stores

    def recording(*args: Any, **kwargs: Any) -> Stores:
        seen.append(real(*args, **kwargs))
        return seen[-1]

    for opener in (agentloop.serve.server, agentloop.bots):
        monkeypatch.setattr(opener, "open_stores", recording)
    return seen


def test_a_store_out_of_reach_is_a_503_with_retry_after_in_the_apis_error_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opened: list[Stores]) -> None:
    async def body() -> tuple[Any, ...]:
        async with client(settings(tmp_path)) as http:
            session = await new_session(http)
            monkeypatch.setattr(opened[0].sessions, "recent", _unreachable)
            history = await http.get(f"/v1/sessions/{session}/messages", headers=auth(ALICE))
            return history.status_code, history.headers.get("retry-after"), history.json()

    status, retry_after, shown = asyncio.run(body())
    assert (status, retry_after) == (503, "7")
    assert shown["error"]["code"] == "unavailable" and "7 s" in shown["error"]["message"]


def test_readyz_names_the_stores_when_they_are_out_of_reach_while_healthz_stays_ok(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opened: list[Stores]) -> None:
    async def body() -> list[tuple[int, Any]]:
        async with client(settings(tmp_path)) as http:
            seen = [await http.get("/readyz")]
            monkeypatch.setattr(opened[0].sessions, "recent", _unreachable)
            seen += [await http.get("/readyz"), await http.get("/healthz")]
            monkeypatch.undo()
            seen.append(await http.get("/readyz"))
            return [(answer.status_code, answer.json()) for answer in seen]

    assert asyncio.run(body()) == [
        (200, {"status": "ready"}),
        (503, {"status": "unavailable", "unreachable": ["stores"]}),
        (200, {"status": "ok"}),
        (200, {"status": "ready"}),
    ]
