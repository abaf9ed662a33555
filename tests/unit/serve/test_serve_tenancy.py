"""Tenancy across the protocols of one `agentloop serve`: a session started through one protocol is another tenant's
not-found through every protocol, and its own tenant's to continue through any other, each with its official client."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from protocols_kit import NOT_FOUND, PROTOCOLS, Answered, NotFound
from serve_kit import ALICE, BOB, CAROL, auth, serve_command

_ROOT = Path(__file__).resolve().parents[3]
_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_ROOT), str(_ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}
"""A subprocess imports this checkout and the bot of tests/agui_kit.py."""


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One `agentloop serve` for the module, whose bot says which user turn of its session each answer is."""
    options = ("--pipeline", "agui_kit:tool_bot", "--rate-limit", "100000", "--burst", "1000")
    with serve_command(tmp_path_factory.mktemp("tenancy"), *options, env=_ENV) as run:
        yield run.url


async def _across(url: str, creating: str, reading: str) -> tuple[Answered | NotFound, dict[str, Answered | NotFound], Answered | NotFound]:
    """ALICE starts a session through `creating`; BOB and CAROL send in it through `reading`; ALICE goes on through `reading`."""
    started = await PROTOCOLS[creating](url, ALICE, "our launch date is secret", None)
    assert isinstance(started, Answered), started
    intruders = {name: await PROTOCOLS[reading](url, token, "what is the launch date?", started.session_id)
                 for name, token in (("another org", BOB), ("same user, another team", CAROL))}
    continued = await PROTOCOLS[reading](url, ALICE, "and the budget?", started.session_id)
    return started, intruders, continued


@pytest.mark.parametrize(("creating", "reading"), list(itertools.product(PROTOCOLS, PROTOCOLS)))
def test_a_session_started_through_one_protocol_is_not_found_by_another_tenant_and_continues_for_its_own(
    url: str, creating: str, reading: str
) -> None:
    started, intruders, continued = asyncio.run(_across(url, creating, reading))
    assert isinstance(started, Answered) and started.text == "You said 'our launch date is secret'; this is turn 1 of this thread."
    assert intruders == {"another org": NOT_FOUND[reading], "same user, another team": NOT_FOUND[reading]}
    assert continued == Answered(started.session_id, "You said 'and the budget?'; this is turn 2 of this thread.")
    history = httpx.get(f"{url}/v1/sessions/{started.session_id}/messages", headers=auth(ALICE)).json()["messages"]
    assert [message["text"] for message in history if message["role"] == "user"] == ["our launch date is secret", "and the budget?"]
    assert httpx.get(f"{url}/v1/sessions/{started.session_id}/messages", headers=auth(BOB)).status_code == 404
